"""Mooncake store as the host tier of vLLM (MooncakeStoreConnector, embedded mode): each rank
contributes a `global_segment_size` and pins a separate local transfer buffer."""

from __future__ import annotations

from kvbench.plan.plan import HostPool
from kvbench.plan.sizers.base import Fit, Sizing, SizingContext, fit_knob
from kvbench.units import GB, MB, GiB

# the InferenceX launchers' local_buffer_size "4GB", which vLLM reads as 4 x 1024^3 B
# (vllm 0.33 distributed/mooncake_store.py _parse_size: "gb": 1024**3)
LOCAL_BUFFER = "4GB"
LOCAL_BUFFER_BYTES = 4 * GiB
# mooncake_master flags of the InferenceX launchers (dsv4_fp4_b300_vllm_mtp.sh,
# minimaxm3_fp8_h100_mtp.sh): evict 10% of the objects once 80% of the store is used.
EVICTION_HIGH_WATERMARK = 0.80
EVICTION_RATIO = 0.10
# The plan's key for the master's settings (not a file: the engine adapter starts the master).
MASTER_KEY = "mooncake-master"


class MooncakeSizer:
    name = "mooncake"
    engines = ("vllm",)

    def size(self, ctx: SizingContext) -> Sizing:
        def pools_of(size: int) -> list[HostPool]:
            return [
                HostPool(name="mooncake_segment", bytes_per_rank=size,
                         inside_configured_size=True, note="global_segment_size per rank"),
                HostPool(name="mooncake_local_buffer", bytes_per_rank=LOCAL_BUFFER_BYTES,
                         inside_configured_size=False,
                         note="local_buffer_size, pinned beside the segment"),
            ]

        zero = ("a Mooncake global_segment_size of 0 mounts no memory into the store, so every "
                "put fails for lack of space")
        if ctx.launcher is not None:  # --sizing launcher: the launcher's bytes, as is
            size = ctx.launcher.bytes_per_rank(1)
            fit = Fit(size, pools_of(size), [] if size > 0 else [
                f"the launcher's arithmetic gives global_segment_size {size:,} B, which is "
                f"refused: {zero}"],
                [f"launcher: {ctx.launcher.spelled} = {size:,} B per rank"])
        else:
            explicit = ctx.explicit_knob(MB)
            fit = fit_knob(ctx, lambda mb: pools_of(mb * MB), hi=ctx.per_rank_budget_bytes // MB,
                           explicit=explicit, pin_policy="exact",
                           describe=lambda mb: f"global_segment_size {mb * MB / GB:.2f} GB per "
                           "rank", zero_means=zero)
        segment = fit.pools[0].bytes_per_rank
        # Embedded mode: each vLLM worker mounts its segment into the store run by the
        # job's mooncake_master; the adapter adds master_server_address once the port is known.
        # local_hostname: vLLM's MooncakeStoreConfig.from_file does not read it (vllm 0.33
        # distributed/mooncake_store.py:51-68; the worker's address comes from
        # MOONCAKE_REQUESTER_LOCAL_HOSTNAME or its IP), Mooncake's own loader requires it
        # (mooncake/mooncake_config.py MooncakeConfig.from_file)
        config = {
            "mode": "embedded",
            "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE",
            "protocol": "rdma",
            "device_name": "",
            "global_segment_size": segment,
            "local_buffer_size": LOCAL_BUFFER,
            "enable_offload": False,
        }
        master = {"eviction_high_watermark_ratio": EVICTION_HIGH_WATERMARK,
                  "eviction_ratio": EVICTION_RATIO}
        connector = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both",
                     "kv_connector_extra_config": {"load_async": True}}
        usable = int(segment * EVICTION_HIGH_WATERMARK)
        return Sizing(
            pools=fit.pools,
            host_kv_tokens=usable // max(1, ctx.kv_bytes_per_token),
            # PYTHONHASHSEED (one seed for every rank's block keys) is the engine data's:
            # the launchers pick 0 or 42 (engines/data/vllm.yaml)
            engine_env={"MOONCAKE_CONFIG_PATH": "mooncake.json"},
            # the --kv-transfer-config JSON (engines/base.py KV_TRANSFER_KEY), so the engine
            # data can add a launcher's other connector keys
            engine_config={"mooncake.json": config, MASTER_KEY: master,
                           "kv-transfer-config": connector},
            errors=list(fit.errors),
            arithmetic=[*fit.arithmetic,
                        f"usable before eviction: {EVICTION_HIGH_WATERMARK:.0%} of the segment = "
                        f"{usable / GB:.2f} GB per rank"],
        )
