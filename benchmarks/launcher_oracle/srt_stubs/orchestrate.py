"""srtctl's orchestrator (`python -m srtctl.cli.do_sweep CONFIG`) with the network edges
stood in (record_srt.py): every health or port wait returns at once and node `nodeN`
resolves to 10.0.0.N. Nothing else of srtctl is touched."""

import importlib
import pkgutil
import sys

import srtctl


def _ready(*_args, **_kwargs):
    return True


def _ip(hostname, *_args, **_kwargs):
    digits = "".join(c for c in str(hostname) if c.isdigit())
    return f"10.0.0.{digits or 1}"


WAITS = ("wait_for_port", "wait_for_health", "wait_for_model", "wait_for_etcd",
         "wait_for_http", "wait_for_frontend", "wait_for_url")
for info in pkgutil.walk_packages(srtctl.__path__, "srtctl."):
    if info.name.startswith(("srtctl.mcp", "srtctl.analysis", "srtctl.benchmarks.scripts")):
        continue
    try:
        module = importlib.import_module(info.name)
    except Exception:
        continue
    for name in WAITS:
        if callable(getattr(module, name, None)):
            setattr(module, name, _ready)
    for name in ("get_hostname_ip", "get_node_ip"):
        if callable(getattr(module, name, None)):
            setattr(module, name, _ip)

from srtctl.cli.do_sweep import main  # noqa: E402

sys.argv = ["do_sweep", *sys.argv[1:]]
main()
