"""Writes through planted links and special files (issue 40 item 3): kvbench never follows a
symlink or special file it did not create inside what it owns, never replaces one, never lets
one run's original result stand in for another's, and refuses output paths that name a
directory. Each case is planted where a hostile results directory would hold it."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.errors import OutputError
from kvbench.files import JsonlWriter, remove_own, write_atomic

RUN = (Path(__file__).resolve().parents[2] / "benchmarks/results/h200/vllm/runs"
       / "qwen3-8b_tp1_conc12_kvdram-vllm-simple")


def _run(capsys, argv):
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr()


@pytest.fixture
def job(tmp_path) -> Path:
    d = tmp_path / "results" / RUN.name
    shutil.copytree(RUN, d)
    if (d / "result.orig.json").exists():
        (d / "result.orig.json").replace(d / "result.json")
    return d


@pytest.mark.parametrize("plant", ["symlink", "dangling", "fifo"])
def test_owned_writes_refuse_what_was_planted(plant, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("theirs")
    path = tmp_path / "own" / "result.json"
    path.parent.mkdir()
    if plant == "symlink":
        path.symlink_to(outside)
    elif plant == "dangling":
        path.symlink_to(tmp_path / "nowhere" / "x")
    else:
        os.mkfifo(path)
    for write in (lambda: write_atomic(path, "x"), lambda: JsonlWriter(path),
                  lambda: remove_own(path)):
        with pytest.raises(OutputError, match="kvbench did not write"):
            write()
    assert outside.read_text() == "theirs" and not (tmp_path / "nowhere").exists()
    assert os.path.lexists(path)  # left as it was found


def test_a_device_node_as_records_is_never_replaced(tmp_path, capsys):
    out = tmp_path / "replay"
    out.mkdir()
    (out / "records.jsonl").symlink_to("/dev/null")
    code, io = _run(capsys, ["replay", "--url", "http://127.0.0.1:9", "--model", "m",
                             "--trace", "synthetic", "--sessions", "1", "--output", str(out),
                             "--max-requests", "1", "--duration", "1"])
    assert code == 2 and "kvbench did not write" in io.err and "Traceback" not in io.err
    assert (out / "records.jsonl").is_symlink()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_rescore_never_writes_through_a_planted_original(job, tmp_path, capsys):
    outside = tmp_path / "elsewhere" / "x.json"
    (job / "result.orig.json").symlink_to(outside)  # dangling, pointing outside
    code, io = _run(capsys, ["rescore", str(job.parent)])
    assert code == 2 and "kvbench did not write" in io.err
    assert not outside.parent.exists()


def test_rescore_keeps_each_runs_own_original(job, capsys):
    twin = job.parent / "copy"
    shutil.copytree(job, twin)  # the same fingerprint and repeat in a second directory
    doc = json.loads((twin / "result.json").read_text())
    doc["created_at"] = "2020-01-01T00:00:00Z"  # told apart by its bytes
    (twin / "result.json").write_text(json.dumps(doc))
    before = {d: (d / "result.json").read_bytes() for d in (job, twin)}
    code, io = _run(capsys, ["rescore", str(job.parent), str(job)])
    assert code == 2 and "holds the same run" in io.err
    rescored = [d for d in (job, twin) if (d / "result.orig.json").exists()]
    assert len(rescored) == 1  # the second claimant is named and left as it was
    [d] = rescored
    assert (d / "result.orig.json").read_bytes() == before[d]  # its own, never the other's
    [other] = {job, twin} - {d}
    assert (other / "result.json").read_bytes() == before[other]


def test_the_dashboard_kvbench_owns_is_not_written_through(job, tmp_path):
    from kvbench.report import write_dashboard

    outside = tmp_path / "victim.html"
    outside.write_text("theirs")
    (job.parent / "dashboard.html").symlink_to(outside)
    with pytest.raises(OutputError):
        write_dashboard([job.parent], job.parent / "dashboard.html", owned=True)
    assert outside.read_text() == "theirs"


@pytest.mark.parametrize("argv", [
    lambda r, o: ["report", str(r), "-o", o],
    lambda r, o: ["matrix", "--config-files", "examples/quickstart.yaml", "--output", o],
])
def test_an_output_path_naming_a_directory_is_refused(argv, job, tmp_path, capsys,
                                                      monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    target = f"{tmp_path}/newdir/"
    code, io = _run(capsys, argv(job.parent, target))
    assert code == 2 and "names a directory" in io.err
    assert not (tmp_path / "newdir").exists()


def test_result_json_reads_back_what_rescore_wrote(job, capsys):
    code, _ = _run(capsys, ["rescore", str(job.parent)])
    assert code == 0
    assert json.loads((job / "result.orig.json").read_text())["status"] == "ok"
