"""ServerProcess with real child processes: ready, dies, hangs, forks, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from fixtures.servers import FORKING_SERVER, PY, READY_SERVER, alive, free_port, script

from kvbench.errors import LaunchError
from kvbench.launch import REDACTED, HelperSpec, ServerProcess, ServerStartError

SRC = Path(__file__).resolve().parents[2] / "src"



def start_fails(tmp_path, port, argv, timeout_s: float = 30) -> ServerStartError:
    """The error of a server that never gets ready."""
    with pytest.raises(ServerStartError) as info, ServerProcess(
            argv, env={}, log_path=tmp_path / "server.log",
            ready_url=f"http://127.0.0.1:{port}/health", ready_timeout_s=timeout_s,
            poll_interval_s=0.05) as server:
        server.wait_ready()
    return info.value

def test_ready_server_then_clean_teardown(tmp_path, port):
    argv = [*script(tmp_path, "ready", READY_SERVER), str(port), "0.3"]
    log = tmp_path / "job" / "server.log"
    lines: list[str] = []
    env = {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz", "SGLANG_SIMULATE_ACC_TOKEN_MODE": "x"}
    with ServerProcess(argv, env=env, log_path=log, ready_url=f"http://127.0.0.1:{port}/health",
                       ready_timeout_s=300, grace_s=2, poll_interval_s=0.1,
                       on_log_line=lines.append) as server:
        took = server.wait_ready()
        pid = server.pid
        assert alive(pid)
        assert server.poll() is None
    assert took > 0.2  # not ready before the server said so (its 0.3 s of loading)
    assert not alive(pid)
    assert "loading weights" in lines and "server ready" in lines
    command = json.loads((log.parent / "command.json").read_text())
    assert command["argv"] == argv
    assert command["env"]["HF_TOKEN"] == REDACTED
    assert command["env"]["SGLANG_SIMULATE_ACC_TOKEN_MODE"] == "x"
    assert "hf_abc" not in (log.parent / "command.json").read_text()
    env_json = json.loads((log.parent / "env.json").read_text())
    assert env_json == {"HF_TOKEN": REDACTED, "SGLANG_SIMULATE_ACC_TOKEN_MODE": "x"}
    # The shell form replays the same command.
    assert command["shell"].endswith(" ".join(argv[:1]) + " " + " ".join(argv[1:]))


@pytest.mark.parametrize(("log_line", "signature"), [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"),
    ("OSError: [Errno 98] Address already in use", "port_in_use"),
    ("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error", "missing_model"),
    ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
     "nccl_error"),
    ("[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
     "watchdog_timeout"),
    ("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
     "watchdog_timeout"),
    ("RuntimeError: Not enough host memory for HiCache", "host_oom"),
    ("AttributeError: 'HybridLinearKVPool' object has no attribute 'layer_num'",
     "hybrid_pool_layer_num"),
])
def test_dies_during_startup_with_tail_and_signature(tmp_path, port, log_line, signature):
    argv = script(tmp_path, "dies", f"""
        import sys, time
        for i in range(30):
            print(f"init step {{i}}", flush=True)
        print({log_line!r}, flush=True)
        time.sleep(0.2)
        sys.exit(1)
    """)
    err = start_fails(tmp_path, port, argv, 60)
    # it aborted when the process died (its exit status), not at the 60 s deadline
    assert err.returncode == 1 and "not ready" not in str(err), str(err)
    assert err.signature is not None and err.signature.name == signature
    assert log_line in err.log_tail[-1]
    assert "init step 29" in str(err) and log_line in str(err)
    assert isinstance(err, LaunchError) and err.hint
    assert err.to_json()["signature"] == signature


def test_killed_by_sigkill_without_an_oom_kill_is_not_host_oom(tmp_path, port):
    """A SIGKILL the cgroup did not count as an OOM kill is reported as SIGKILL."""
    argv = script(tmp_path, "oomkilled", """
        import os, signal
        print("allocating pinned host pool", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    err = start_fails(tmp_path, port, argv)
    assert err.returncode == -signal.SIGKILL
    assert err.signature.name == "sigkill"
    assert "host out of memory" not in str(err)


def test_hang_hits_the_deadline(tmp_path, port):
    argv = script(tmp_path, "hangs", """
        import time
        print("capturing cuda graphs", flush=True)
        time.sleep(600)
    """)
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as info, ServerProcess(
            argv, env={}, log_path=tmp_path / "server.log",
            ready_url=f"http://127.0.0.1:{port}/health", ready_timeout_s=1.5, grace_s=1,
            poll_interval_s=0.1) as server:
        pid = server.pid
        server.wait_ready()
    assert time.monotonic() - t0 >= 1.5  # not before its deadline (after it: said below)
    assert "not ready" in str(info.value) and "within 1.5 s" in str(info.value)
    assert info.value.returncode is None
    assert "capturing cuda graphs" in info.value.log_tail
    assert not alive(pid)


def test_grandchildren_do_not_survive_teardown(tmp_path, port):
    pid_file = tmp_path / "pids"
    argv = [*script(tmp_path, "forks", FORKING_SERVER), str(port), str(pid_file)]
    with ServerProcess(argv, env={}, log_path=tmp_path / "server.log",
                       ready_url=f"http://127.0.0.1:{port}/", ready_timeout_s=300, grace_s=2,
                       poll_interval_s=0.1) as server:
        server.wait_ready()
        pids = [int(p) for p in pid_file.read_text().split()] + [server.pid]
        # No waiting for the tree monitor: the orphan (re-parented, own session) must be
        # found at teardown through the marker it inherited in its environment.
        assert all(alive(p) for p in pids)
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == []


def test_helper_process_started_after_ready_and_torn_down(tmp_path, port):
    router_port = free_port()
    argv = [*script(tmp_path, "ready", READY_SERVER), str(port), "0.1"]
    helper = HelperSpec("router", [*argv[:1], argv[1], str(router_port), "0.1"],
                        ready_url=f"http://127.0.0.1:{router_port}/health")
    with ServerProcess(argv, env={}, log_path=tmp_path / "server.log",
                       ready_url=f"http://127.0.0.1:{port}/health", ready_timeout_s=300,
                       extra_procs=[helper], grace_s=2, poll_interval_s=0.1) as server:
        server.wait_ready()
        helper_pid = server._procs[1].popen.pid
        assert alive(helper_pid)
    assert not alive(helper_pid)
    assert (tmp_path / "router.log").read_text().strip().endswith("server ready")
    assert json.loads((tmp_path / "router.command.json").read_text())["argv"] == helper.argv


DRIVER = """
import sys
sys.path.insert(0, {src!r})
from kvbench.launch import ServerProcess
argv = [sys.executable, "-c",
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        "print('started', flush=True); time.sleep(600)"]
try:
    with ServerProcess(argv, env={{}}, log_path={log!r}, ready_url="http://127.0.0.1:{port}/",
                       ready_timeout_s=300, grace_s=2, poll_interval_s=0.1) as s:
        print("PID", s.pid, flush=True)
        s.wait_ready()
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_during_wait_tears_everything_down(tmp_path, port, sig):
    log = tmp_path / "server.log"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(src=str(SRC), log=str(log), port=port))
    proc = subprocess.Popen([PY, str(driver)], stdout=subprocess.PIPE, text=True)
    server_pid = int(proc.stdout.readline().split()[1])
    deadline = time.monotonic() + 10
    while "started" not in (log.read_text() if log.exists() else "") \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    children = _children(server_pid)
    assert children, "the fake server should have forked a worker"
    proc.send_signal(sig)
    # a hang guard, far from the 0.4 s this takes: the teardown's own bounded waits (tree
    # monitor 5 s, TERM grace 2 s, KILL 10 s, process 5 s, watchdog 5 s) add up to ~27 s, and
    # a full suite on two busy cores once ran past 30 s here (session 14's .ci/run)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "INTERRUPTED" in out
    assert not alive(server_pid)
    assert [c for c in children if alive(c)] == []


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                pass
    return out


def test_missing_program_is_a_launch_error(tmp_path, port):
    with pytest.raises(LaunchError, match="cannot start"), ServerProcess(
            ["/nonexistent/engine-binary"], env={}, log_path=tmp_path / "server.log",
            ready_url=f"http://127.0.0.1:{port}/", ready_timeout_s=5):
        pass


def test_for_spec_starts_the_router_after_the_engine(tmp_path, port):
    from types import SimpleNamespace

    router_port = free_port()
    server = [*script(tmp_path, "ready", READY_SERVER)]
    spec = SimpleNamespace(
        argv=[*server, str(port)], env={"A": "1"},
        health_url=f"http://127.0.0.1:{port}/health",
        router_argv=[*server, str(router_port), "0.1"],
        router_health_url=f"http://127.0.0.1:{router_port}/health")
    with ServerProcess.for_spec(spec, log_path=tmp_path / "server.log", ready_timeout_s=300,
                                extra_args=["0.1"], grace_s=2, poll_interval_s=0.1) as proc:
        took = proc.wait_ready()
        assert proc.wait_ready() == took  # idempotent: the router is not started twice
        assert [p.name for p in proc._procs] == ["server", "router"]
        assert proc.argv[-2:] == [str(port), "0.1"]


IPC_OOM = Path(__file__).resolve().parents[1] / "data" / "sglang" / \
    "server-0.5.17-qwen3.5-ipc-oom-exit0.excerpt.log"


def test_the_cause_far_above_the_shown_tail_is_named(tmp_path, port):
    """Issue 37, device call 3: SGLang 0.5.17's tokenizer worker ran out of GPU memory in its
    multimodal CUDA-IPC pool, and the server exited 0 some 140 lines of health checks and
    teardown later. The real log replayed: named as CUDA out of memory, not as the teardown."""
    argv = script(tmp_path, "ipc_oom", f"""
        import sys
        sys.stdout.write(open({str(IPC_OOM)!r}).read())
        sys.stdout.flush()
    """)
    err = start_fails(tmp_path, port, argv)
    assert err.returncode == 0 and err.signature.name == "cuda_oom"
    assert err.signature.line.startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert len(err.log_tail) == 40 and not any("OutOfMemoryError" in x for x in err.log_tail)
