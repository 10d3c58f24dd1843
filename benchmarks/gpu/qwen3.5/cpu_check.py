"""Issue 37 on CPU, against SGLang 0.5.17's own code (run by cpu_check.sh in a clean venv that
holds the bundle's wheels for cp311 and the image's packages; README.md "CPU checks"):

  config   ModelConfig of the dummy directory, target and MTP draft: the class SGLang serves
           it with, the hybrid GDN layer split, num_nextn_predict_layers of the draft (None
           without sglang-34560: the seed-000 condition; 1 with it, given PATCHED=1)
  mla      ModelConfig of an MLA directory (DeepSeek-V3), target and NextN draft: the class,
           the attention arch, the latent and rope widths SGLang's MLA pools are sized by,
           the layers each pool holds (the draft's: num_nextn_predict_layers), the model class
           SGLang's registry imports for it
  state    the Mamba state per request SGLang sizes (mamba2_cache_params.mamba_cache_per_req)
           for fp32 and bf16 SSM states, beside kvbench's profile
  args     SGLang's parser and ServerArgs resolution on the argv kvbench renders for a step
           (device probes answer as an H200 would; nothing is allocated)
  tokenizer  the tokenizer manager's start: processor, multimodal processor, tokenizer, chat
             template on the dummy directory

    python cpu_check.py config|mla|state MODEL_DIR
    python cpu_check.py args|tokenizer ARGV_JSON"""

from __future__ import annotations

import json
import os
import sys


def config(model: str) -> None:
    from sglang.srt.configs.hybrid_arch import hybrid_gdn_config
    from sglang.srt.configs.model_config import ModelConfig

    tgt = ModelConfig(model_path=model, trust_remote_code=True)
    g = hybrid_gdn_config(tgt)
    print("target", tgt.hf_config.architectures, type(tgt.hf_config).__name__, "text",
          type(tgt.hf_text_config).__name__, "multimodal", tgt.is_multimodal)
    print("  full attention", g.full_attention_layer_ids, "linear", g.linear_layer_ids,
          "kv heads", tgt.get_num_kv_heads(1), "head_dim", tgt.head_dim, "experts",
          tgt.hf_text_config.num_experts, "top", tgt.hf_text_config.num_experts_per_tok)
    drf = ModelConfig(model_path=model, trust_remote_code=True, is_draft_model=True)
    print("draft", drf.hf_config.architectures, "hf_config.num_nextn_predict_layers",
          getattr(drf.hf_config, "num_nextn_predict_layers", None),
          "hf_text_config.num_nextn_predict_layers",
          getattr(drf.hf_text_config, "num_nextn_predict_layers", None),
          "ModelConfig.num_nextn_predict_layers", drf.num_nextn_predict_layers,
          "hybrid", type(hybrid_gdn_config(drf)).__name__)


def mla(model: str) -> None:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.models.registry import ModelRegistry

    for draft in (False, True):
        mc = ModelConfig(model_path=model, trust_remote_code=True, is_draft_model=draft)
        cell = mc.kv_lora_rank + mc.qk_rope_head_dim
        # the layers the worker's KV pool holds: a draft with MTP layers, that many
        # (model_runner_components/layer_setup.py:154-172, 0.5.17)
        nextn = mc.num_nextn_predict_layers
        layers = nextn if draft and nextn else max(mc.num_hidden_layers,
                                                   mc.num_attention_layers)
        print("draft" if draft else "target", mc.hf_config.architectures,
              type(mc.hf_config).__name__, "attention", mc.attention_arch.name,
              "kv_lora_rank", mc.kv_lora_rank, "qk_rope_head_dim", mc.qk_rope_head_dim,
              "num_hidden_layers", mc.num_hidden_layers, "num_nextn_predict_layers",
              mc.num_nextn_predict_layers, "experts", mc.hf_text_config.n_routed_experts,
              "first_k_dense_replace", mc.hf_text_config.first_k_dense_replace,
              "scaling", round(mc.scaling, 6))
        cls, _ = ModelRegistry.resolve_model_cls(mc.hf_config.architectures)
        print(f"  model class {cls.__module__}.{cls.__name__}")
        print(f"  pool: latent cell {cell} x bf16 x {layers} layers = {cell * 2 * layers} B "
              "per token")


def state(model: str) -> None:
    import sglang.srt.configs.qwen3_next as qn
    from sglang.srt.configs.hybrid_arch import hybrid_gdn_config
    from sglang.srt.configs.model_config import ModelConfig

    class _TP1:
        attn_tp_size = 1

    qn.get_parallel = lambda: _TP1()  # the scheduler's parallel state: one attention rank
    cfg = hybrid_gdn_config(ModelConfig(model_path=model, trust_remote_code=True))
    for dtype in ("float32", "bfloat16"):
        os.environ["SGLANG_MAMBA_SSM_DTYPE"] = dtype
        p = cfg.mamba2_cache_params
        print(dtype, "layers", p.layers, "conv", p.shape.conv, "temporal", p.shape.temporal,
              "per request", p.mamba_cache_per_req, "B")


def _fake_h200() -> None:
    import sglang.srt.configs.model_config  # noqa: F401 - loaded on CPU first
    import sglang.srt.server_args as sa
    import sglang.srt.utils.common as common
    import torch

    for mod in (common, sa):
        for name in ("is_cuda", "is_cuda_alike"):
            if hasattr(mod, name):
                setattr(mod, name, lambda: True)
    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"
    torch.cuda.mem_get_info = lambda *a, **k: (143_000 << 20, 143_771 << 20)
    common.get_device_memory_capacity = sa.get_device_memory_capacity = lambda *a, **k: 143_771.0


def args(argv_json: str) -> None:
    _fake_h200()
    from sglang.srt.server_args import prepare_server_args

    with open(argv_json) as f:
        sa = prepare_server_args(json.load(f))
    for k in ("page_size", "attention_backend", "sampling_backend", "kv_cache_dtype",
              "mem_fraction_static", "max_total_tokens", "max_mamba_cache_size",
              "max_running_requests", "mamba_radix_cache_strategy", "disable_overlap_schedule",
              "mamba_track_interval", "mamba_ssm_dtype", "speculative_algorithm",
              "speculative_num_steps", "speculative_num_draft_tokens", "speculative_eagle_topk",
              "enable_hierarchical_cache", "hicache_size", "hicache_io_backend",
              "hicache_mem_layout", "hicache_write_policy", "tokenizer_path", "quantization",
              "load_format", "disable_cuda_graph", "speculative_draft_model_path",
              "speculative_moe_runner_backend", "moe_runner_backend", "disable_radix_cache",
              "chunked_prefill_size"):
        print(f"{k} = {getattr(sa, k, '<none>')}")


def tokenizer(argv_json: str) -> None:
    import sglang.srt.server_args as sa
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.managers.multimodal_processor import get_mm_processor, import_processors
    from sglang.srt.managers.tokenizer_manager import _get_processor_wrapper
    from sglang.srt.utils.hf_transformers import get_tokenizer_from_processor

    torch.cuda.mem_get_info = lambda *a, **k: (143_000 << 20, 143_771 << 20)
    sa.get_device_memory_capacity = lambda *a, **k: 143_771.0
    # CPU: the mamba strategy needs CUDA; the tokenizer side reads none of these
    with open(argv_json) as f:
        server = sa.prepare_server_args([
            *json.load(f), "--device", "cpu", "--mamba-radix-cache-strategy", "no_buffer",
            "--disable-overlap-schedule", "--page-size", "1"])
    mc = ModelConfig.from_server_args(server)
    import_processors("sglang.srt.multimodal.processors")
    proc = _get_processor_wrapper(server)
    mm = get_mm_processor(mc.hf_config, server, proc, "default", model_config=mc)
    tok = get_tokenizer_from_processor(proc)
    ids = tok.apply_chat_template([{"role": "user", "content": "the model cache"}],
                                  add_generation_prompt=True)
    ids = ids if isinstance(ids, list) else ids["input_ids"]
    print(type(proc).__name__, type(mm).__name__, type(tok).__name__, len(tok), "tokens;",
          "chat", repr(tok.decode(ids)))


if __name__ == "__main__":
    steps = {"config": config, "mla": mla, "state": state, "args": args, "tokenizer": tokenizer}
    steps[sys.argv[1]](sys.argv[2])
