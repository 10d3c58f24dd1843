"""User-given output paths (`report -o`, `simulate --output`, `matrix --output`) are written,
never replaced: a device node, a FIFO or a symlink stays what it was; what cannot be written
is refused in one line; `-` is stdout."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from fixtures.results_data import make_job

from kvbench.cli import main

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    make_job(root, "sim", 4, False)
    make_job(root, "sim", 4, True)
    return root


def _run(capsys, argv):
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr()


COMMANDS = {
    "report": lambda results, out: ["report", str(results), "-o", str(out)],
    "matrix": lambda results, out: ["matrix", "--config-files", str(QUICKSTART), "--format",
                                    "json", "--output", str(out)],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_character_device_is_written_into_not_replaced(command, results, capsys):
    code, _ = _run(capsys, COMMANDS[command](results, "/dev/null"))
    assert code == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_full_device_is_a_clean_error(command, results, capsys):
    code, out = _run(capsys, COMMANDS[command](results, "/dev/full"))
    assert code == 2
    assert "error: /dev/full: cannot write: No space left on device" in out.err
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_fifo_with_a_reader_gets_the_bytes(command, results, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = bytearray()

    def read() -> None:
        with open(fifo, "rb") as f:
            got.extend(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    # the reader must have the FIFO open before the writer tries (O_NONBLOCK: no reader
    # is refused, not waited for)
    for _ in range(200):
        if any(os.path.realpath(f"/proc/self/fd/{fd}") == str(fifo)
               for fd in os.listdir("/proc/self/fd")):
            break
        threading.Event().wait(0.01)
    code, out = _run(capsys, COMMANDS[command](results, fifo))
    reader.join(timeout=10)
    assert code == 0, out.err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert len(got) > 100


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_fifo_nobody_reads_is_refused_at_once(command, results, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, out = _run(capsys, COMMANDS[command](results, fifo))
    assert code == 2
    assert f"error: {fifo}: is a FIFO with no reader" in out.err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_symlink_is_written_through_and_stays_a_link(command, results, tmp_path, capsys):
    target = tmp_path / "real.out"
    target.write_text("old")
    link = tmp_path / "link.out"
    link.symlink_to(target)
    code, out = _run(capsys, COMMANDS[command](results, link))
    assert code == 0, out.err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() != "old"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_directory_or_a_symlink_loop_is_refused(command, results, tmp_path, capsys):
    code, out = _run(capsys, COMMANDS[command](results, tmp_path))
    assert code == 2 and "is a directory" in out.err
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    code, out = _run(capsys, COMMANDS[command](results, loop))
    assert code == 2 and f"error: {loop}: cannot write" in out.err
    assert loop.is_symlink()


def test_dash_is_stdout(results, capsys):
    code, out = _run(capsys, ["report", str(results), "-o", "-"])
    assert code == 0
    assert out.out.lstrip().startswith("<!DOCTYPE html>") or "<html" in out.out[:500]
    assert not Path("-").exists()


def test_simulate_output_to_a_device_and_stdout(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        f'{{"timestamp": {i * 100}, "input_length": 600, "output_length": 5, '
        f'"hash_ids": [1, 2]}}\n' for i in range(5)))
    code, out = _run(capsys, ["simulate", "--trace", str(trace), "--output", "/dev/null"])
    assert code == 0, out.err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    code, out = _run(capsys, ["simulate", "--trace", str(trace), "--output", "-",
                              "--format", "table"])
    assert code == 0, out.err
    assert out.out.startswith("{\n") and '"cache": {' in out.out  # the JSON, then the table
