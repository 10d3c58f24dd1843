"""LMCache multiprocess servers as managed services of the job, and vLLM's connector to them.

The InferenceX launchers start one `lmcache server` per rank with an L1 of the planned size,
wait for each one's /healthcheck and point vLLM's LMCacheMPConnector at their ZMQ URLs
(minimaxm3_fp8_mi300x_mtp.sh). kvbench does the same, on ports derived from the client port."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kvbench.engines.spec import ServiceSpec
from kvbench.errors import EngineError

if TYPE_CHECKING:
    from kvbench.engines.context import BuildContext

MP_KEY = "lmcache-mp"  # the plan's settings (plan/sizers/lmcache.py)
ZMQ_PORT_OFFSET = 13_000
HTTP_PORT_OFFSET = 14_000


def _ports(ctx: BuildContext, servers: int) -> list[tuple[int, int]]:
    last = ctx.port + HTTP_PORT_OFFSET + servers - 1
    if last > 65535:
        raise EngineError(f"--port {ctx.port}: {servers} LMCache server(s) need HTTP ports up "
                          f"to {ctx.port} + {HTTP_PORT_OFFSET:,} + {servers - 1} = {last:,}, "
                          f"above 65535; allowed: --port up to "
                          f"{65535 - HTTP_PORT_OFFSET - servers + 1}")
    return [(ctx.port + ZMQ_PORT_OFFSET + i, ctx.port + HTTP_PORT_OFFSET + i)
            for i in range(servers)]


def server_services(ctx: BuildContext, settings: dict[str, Any]) -> list[ServiceSpec]:
    out = []
    for i, (zmq, http) in enumerate(_ports(ctx, int(settings["servers"]))):
        argv = ["lmcache", "server", "--host", "127.0.0.1", "--port", str(zmq),
                "--http-host", "127.0.0.1", "--http-port", str(http),
                "--l1-size-gb", str(settings["l1_size_gb"]),
                "--l1-init-size-gb", str(settings["l1_init_size_gb"]),
                "--l1-read-ttl-seconds", "7200", "--chunk-size", str(settings["chunk_size"]),
                "--max-workers", "2", "--eviction-policy", "LRU",
                "--supported-transfer-mode", "lmcache_driven"]
        out.append(ServiceSpec(name=f"lmcache-server-{i}", argv=argv,
                               ready_url=f"http://127.0.0.1:{http}/healthcheck"))
    return out


def connector_config(ctx: BuildContext, settings: dict[str, Any]) -> str:
    urls = ",".join(f"tcp://127.0.0.1:{zmq}" for zmq, _ in _ports(ctx, int(settings["servers"])))
    return json.dumps({
        "kv_connector": "LMCacheMPConnector",
        "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.mp.server_urls": urls,
                                      "lmcache.mp.mq_timeout": 6000.0},
    })
