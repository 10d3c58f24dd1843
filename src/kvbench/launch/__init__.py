"""Server processes: start, log, wait for readiness, recognise failures, tear down."""

from kvbench.launch.failure import ServerStartError
from kvbench.launch.logtail import read_tail
from kvbench.launch.process import HelperSpec, ServerProcess
from kvbench.launch.redact import REDACTED, redact_argv, redact_env
from kvbench.launch.signatures import Match, recognise

__all__ = [
    "REDACTED",
    "HelperSpec",
    "Match",
    "ServerProcess",
    "ServerStartError",
    "read_tail",
    "recognise",
    "redact_argv",
    "redact_env",
]
