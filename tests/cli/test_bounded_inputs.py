"""Everything a user gives is bounded: recipes, runners files, profiles and traces are read
only from regular files of a capped size (a device or a FIFO ends at once), every YAML loader
caps alias expansion, absurd concurrencies and a --max-input-tokens below every turn end at
once with an error, and non-finite, negative or zero profile numbers are refused at load with
their field path."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
import yaml

from kvbench.cli import main
from kvbench.hardware.profile import PROFILE_DIR
from kvbench.sim.engine_profile import ENGINE_DIR

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = (REPO / "examples" / "quickstart.yaml").read_text()
RUNNERS = REPO / "examples" / "runners.yaml"
ROW = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'


def _run(capsys, argv) -> tuple[int, str]:
    """The exit status and stderr of one command. How long it took is not asserted: the
    message names the bound that ended it (a hang would meet pytest's timeout)."""
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _bomb() -> str:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


@pytest.fixture()
def trace(tmp_path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(ROW * 3)
    return path


@pytest.fixture()
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "FIFO"])
def test_special_files_end_at_once(special, fifo, trace, tmp_path, capsys):
    path = str(fifo) if special == "FIFO" else special
    cases = [
        ["validate", path],
        ["plan", "--config-files", path, "--runner-config",
         str(REPO / "tests" / "data" / "inferencex" / "runners.yaml")],
        ["matrix", "--config-files", str(REPO / "examples" / "quickstart.yaml"),
         "--runner-config", path],
        ["simulate", "--trace", path],
        ["simulate", "--trace", str(trace), "--engine-profile", _linked(tmp_path, path, "e")],
        ["simulate", "--trace", str(trace), "--hardware", _linked(tmp_path, path, "h")],
    ]
    for argv in cases:
        code, err = _run(capsys, argv)
        assert code == 2, (argv, err)
        assert "not a regular file (a device, FIFO or socket)" in err, (argv, err)


def _linked(tmp_path: Path, target: str, name: str) -> str:
    """A .yaml name for a special file (profiles are recognised by their suffix)."""
    link = tmp_path / f"{name}.yaml"
    if not link.is_symlink():
        link.symlink_to(target)
    return str(link)


def test_a_huge_recipe_is_refused_by_its_size(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(65 * 2**20)  # sparse: 65 MiB of zeros, no disk used
    code, err = _run(capsys, ["validate", str(big)])
    assert code == 2 and "is too large for a YAML file (at most 67,108,864)" in err


def test_a_gzip_bomb_trace_is_refused(tmp_path, capsys):
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as f:
        chunk = b"\n" * (64 << 20)
        for _ in range(17):  # 1.06 GiB of newlines, about 1 MB compressed
            f.write(chunk)
    code, err = _run(capsys, ["simulate", "--trace", str(bomb)])
    assert code == 2 and "decompresses to more than 1,073,741,824 bytes" in err


def _profile_with(tmp_path: Path, src: Path, edit) -> str:
    doc = yaml.safe_load(src.read_text())
    edit(doc)
    path = tmp_path / f"p{abs(hash(repr(doc))) % 10**8}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _set(*keys, value):
    def edit(doc):
        for k in keys[:-1]:
            doc = doc[k]
        doc[keys[-1]] = value
    return edit


HARDWARE = [
    (("hbm_bandwidth_bytes_per_s", "value"), float("nan"), "hbm_bandwidth_bytes_per_s"),
    (("hbm_bytes", "value"), 0.0, "hbm_bytes"),
    (("host_to_device_bytes_per_s", "value"), -64e9, "host_to_device_bytes_per_s"),
    (("device_to_host_bytes_per_s", "value"), float("inf"), "device_to_host_bytes_per_s"),
    (("flops_per_s", "bf16", "value"), 0.0, "flops_per_s"),
    (("gpus_per_node",), 0, "gpus_per_node"),
    (("achievable_hbm_fraction",), float("nan"), "achievable_hbm_fraction"),
    (("host_dram_bytes_per_node", "value"), -1.0, "host_dram_bytes_per_node"),
]


@pytest.mark.parametrize(("keys", "value", "field"), HARDWARE)
def test_bad_hardware_profile_numbers_are_refused_with_the_field(keys, value, field, tmp_path,
                                                                 trace, capsys):
    path = _profile_with(tmp_path, PROFILE_DIR / "h100.yaml", _set(*keys, value=value))
    code, err = _run(capsys, ["simulate", "--trace", str(trace), "--hardware", path])
    assert code == 2, err
    first = err.splitlines()[0]
    assert first.startswith(f"error: {Path(path).resolve()}: invalid hardware profile: {field}")
    assert "Traceback" not in err and len(err.splitlines()) <= 2


ENGINE = [
    ("step_overhead_s", float("nan")), ("step_overhead_s", 0.0),
    ("prefill_overhead_s", -0.001), ("per_sequence_overhead_s", float("inf")),
    ("block_tokens", 0), ("block_tokens", 2.5), ("prompt_token_overhead_s", float("nan")),
    ("load_bandwidth_efficiency", float("nan")), ("admit_full_prompt", 7),
]


@pytest.mark.parametrize(("field", "value"), ENGINE)
def test_bad_engine_profile_numbers_are_refused_with_the_field(field, value, tmp_path, trace,
                                                               capsys):
    def edit(doc):
        doc[field] = {"value": value, "source": "test"}
    path = _profile_with(tmp_path, ENGINE_DIR / "vllm.yaml", edit)
    code, err = _run(capsys, ["simulate", "--trace", str(trace), "--engine-profile", path])
    assert code == 2, err
    assert err.startswith(f"error: {Path(path).resolve()}: invalid engine profile: {field}"), err
    assert "Traceback" not in err and len(err.splitlines()) <= 2


@pytest.mark.parametrize("kind", ["engine", "hardware"])
def test_profiles_cap_alias_expansion(kind, tmp_path, trace, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())
    flag = "--engine-profile" if kind == "engine" else "--hardware"
    code, err = _run(capsys, ["simulate", "--trace", str(trace), flag, str(path)])
    assert code == 2 and "YAML aliases expand to more than 500,000 nodes" in err


def test_mirror_caps_alias_expansion(tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(_bomb())
    code, err = _run(capsys, ["recipe", "mirror", "--config-files", str(path),
                                    "--config-keys", "x", "--dry-run"])
    assert code == 2 and "YAML aliases expand to more than 500,000 nodes" in err


@pytest.mark.parametrize("conc", ["9223372036854775807", "65537"])
def test_absurd_concurrencies_end_at_once(conc, tmp_path, trace, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(QUICKSTART.replace("conc-list: [3, 6, 12]", f"conc-list: [{conc}]"))
    for argv in (["plan", "--config-files", str(recipe), "--runner-config", str(RUNNERS)],
                 ["simulate", "--trace", str(trace), "--concurrency", conc],
                 ["replay", "--url", "http://127.0.0.1:9", "--model", "m", "--trace",
                  str(trace), "--output", str(tmp_path / "o"), "--concurrency", conc]):
        code, err = _run(capsys, argv)
        assert code in (2, 3), (argv, err)
        assert "65536" in err.replace(",", ""), (argv, err)


def test_max_input_tokens_below_every_turn_ends_at_once(trace, capsys):
    code, err = _run(capsys, ["simulate", "--trace", str(trace), "--concurrency", "4",
                                    "--duration", "3600", "--max-input-tokens", "10"])
    assert code == 2
    assert ("--max-input-tokens 10 is below every turn's prompt (the shortest is 600 "
            "tokens)") in err
