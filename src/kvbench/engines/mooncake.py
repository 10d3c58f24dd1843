"""Mooncake store as a managed service of the job: the `mooncake_master` the engine's workers
mount their segments into, and the `master_server_address` their config must name.

The InferenceX launchers start the master on the client port + 12,000 with the recipe's
eviction ratios before the engine, and stop it after (dsv4_fp4_b300_vllm_mtp.sh). kvbench does
the same, and waits for the master's admin HTTP server (its metrics port) instead of sleeping."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbench.engines.spec import ServiceSpec
from kvbench.errors import EngineError

if TYPE_CHECKING:
    from kvbench.engines.context import BuildContext

CONFIG_FILE = "mooncake.json"
MASTER_KEY = "mooncake-master"  # the plan's master settings (plan/sizers/mooncake.py)
MASTER_PORT_OFFSET = 12_000
METRICS_PORT_OFFSET = 12_001


def master_port(ctx: BuildContext) -> int:
    return ctx.port + MASTER_PORT_OFFSET


def master_service(ctx: BuildContext, settings: dict[str, Any]) -> ServiceSpec:
    port = master_port(ctx)
    metrics = ctx.port + METRICS_PORT_OFFSET
    if metrics > 65535:
        raise EngineError(f"--port {ctx.port}: the Mooncake master's admin port {ctx.port} + "
                          f"{METRICS_PORT_OFFSET:,} = {metrics:,} is above 65535; allowed: "
                          f"--port up to {65535 - METRICS_PORT_OFFSET}")
    argv = ["mooncake_master", f"--port={port}", f"--metrics_port={metrics}"]
    for flag in ("eviction_high_watermark_ratio", "eviction_ratio"):
        if flag in settings:
            argv.append(f"--{flag}={settings[flag]}")
    return ServiceSpec(name="mooncake-master", argv=argv,
                       ready_url=f"http://127.0.0.1:{metrics}/metrics")


def with_master_address(config: dict[str, Any], ctx: BuildContext) -> dict[str, Any]:
    """The plan's mooncake.json plus the address of this job's master."""
    return {**config, "master_server_address": f"127.0.0.1:{master_port(ctx)}"}
