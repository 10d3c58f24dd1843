from __future__ import annotations

import subprocess
import sys

import pytest
from fixtures.cuda import needs_cuda

from kvbench.cli import main

SHAPE = ["--num-layers", "2", "--hidden-size", "64", "--num-heads", "4", "--num-kv-heads", "2",
         "--head-dim", "16", "--intermediate-size", "128"]


def test_bad_point_spec_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["calibrate", "-o", str(tmp_path / "p.yaml"), *SHAPE, "--prefill", "eight"])
    assert e.value.code == 2
    assert "--prefill 'eight' is not BATCH:TOKENS" in capsys.readouterr().err


def test_without_cuda_it_says_so(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the no-GPU message cannot be seen here")
    res = subprocess.run(
        [sys.executable, "-m", "kvbench", "calibrate", "-o", str(tmp_path / "p.yaml"), *SHAPE],
        capture_output=True, text=True,
    )
    assert res.returncode == 2
    assert "needs a CUDA GPU" in res.stderr


@needs_cuda
@pytest.mark.slow
def test_small_gpu_calibration_writes_a_loadable_profile(tmp_path):
    from kvbench.hardware import load_hardware

    out = tmp_path / "p.yaml"
    main_args = ["calibrate", "-o", str(out), *SHAPE, "--prefill", "1:128", "--decode", "2:256"]
    with pytest.raises(SystemExit) as e:
        main(main_args)
    assert e.value.code in (0, None)
    profile = load_hardware(out)
    assert profile.kind == "measured"
    assert profile.layer_timings[0].points
