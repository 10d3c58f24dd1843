"""`kvbench dummy-model` and `--load-format dummy`: a model directory built offline whose
tokenizer covers the config's whole vocabulary, so random weights decode to text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU_RECIPE = REPO / "benchmarks" / "gpu" / "vllm" / "recipe.yaml"
GPU_RUNNERS = REPO / "benchmarks" / "gpu" / "vllm" / "runners.yaml"


def kvbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvbench", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dummy") / "qwen3-8b"
    res = kvbench("dummy-model", str(out), "--model", "qwen3-8b")
    assert res.returncode == 0, res.stderr
    return out


def test_the_config_is_the_models_and_the_vocabulary_is_complete(model_dir):
    from transformers import AutoTokenizer

    cfg = json.loads((model_dir / "config.json").read_text())
    assert (cfg["architectures"], cfg["num_hidden_layers"], cfg["num_key_value_heads"],
            cfg["vocab_size"]) == (["Qwen3ForCausalLM"], 36, 8, 151_936)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert len(tok) == 151_936
    assert tok.convert_ids_to_tokens(cfg["eos_token_id"]) == "<|im_end|>"
    # any id random weights emit decodes to text (the last ones are padding tokens " wN")
    for tid in (7, 300, 4_000, 75_000, 151_935):
        assert tok.decode([tid]).strip(), tid
    first_pad = tok.convert_tokens_to_ids("Ġw0")
    assert tok.decode([151_935]) == f" w{151_935 - first_pad}"
    # the padding is plain vocabulary: 151,487 added tokens made each load take 24 s (SGLang
    # loads the tokenizer about eight times per start); only the specials are added tokens
    assert sorted(tok.get_added_vocab()) == ["<|endoftext|>", "<|im_end|>", "<|im_start|>"]
    assert tok.encode(" w5", add_special_tokens=False) != [first_pad + 5]  # never a prompt word


def test_prompts_synthesised_with_it_are_exactly_their_token_count(model_dir):
    from transformers import AutoTokenizer

    from kvbench.workload import PromptBuilder, Vocabulary
    from kvbench.workload.session import Turn

    vocab = Vocabulary(str(model_dir))
    assert len(vocab.words) >= 16
    prompt = PromptBuilder(vocab, "run1").build(Turn(640, 8, (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
                                                     64), "ns", ("s", 0))
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert len(tok.encode(prompt.text, add_special_tokens=False)) == prompt.num_tokens == 640


def test_launch_serves_dummy_weights_and_refuses_what_cannot(model_dir):
    res = kvbench("launch", "--dry-run", "--format", "json", "--config-files", str(GPU_RECIPE),
                  "--runner-config", str(GPU_RUNNERS), "--load-format", "dummy",
                  "--model-path", str(model_dir))
    assert res.returncode == 0, res.stderr
    for job in json.loads(res.stdout):
        argv = job["argv"]
        assert argv[2] == str(model_dir)
        assert argv[argv.index("--load-format") + 1] == "dummy"
    bad = kvbench("launch", "--dry-run", "--config-files", str(GPU_RECIPE), "--runner-config",
                  str(GPU_RUNNERS), "--load-format", "random")
    assert bad.returncode == 2
    assert "--load-format 'random'" in bad.stderr and "auto, dummy" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_missing_config_is_one_clear_error(tmp_path):
    res = kvbench("dummy-model", str(tmp_path / "m"), "--config", str(tmp_path / "nope.json"))
    assert res.returncode == 2 and "cannot read a config.json" in res.stderr
    res = kvbench("dummy-model", str(tmp_path / "m"), "--model", "gpt-9")
    assert res.returncode == 2
    assert "allowed: deepseek-v3-scaled, qwen3-8b, qwen3.5-397b-a17b-scaled" in res.stderr


def test_the_scaled_qwen35_keeps_the_checkpoints_architecture(tmp_path):
    """Qwen3.5-397B-A17B at 8 layers: the nested multimodal config.json, full attention every
    4th layer with Gated DeltaNet between, the MTP layer, the processor files SGLang loads for
    a multimodal architecture; its profile's per-request state is SGLang 0.5.17's own
    mamba_cache_per_req for this config (25,608,192 B fp32, 13,025,280 B bf16: configs/
    qwen3_next.py mamba2_cache_params, read on CPU in benchmarks/gpu/qwen3.5/cpu_check.py)."""
    from kvbench.models import load_model

    out = tmp_path / "q35"
    res = kvbench("dummy-model", str(out), "--model", "qwen3.5-397b-a17b-scaled")
    assert res.returncode == 0, res.stderr
    cfg = json.loads((out / "config.json").read_text())
    text = cfg["text_config"]
    assert (cfg["architectures"], cfg["model_type"], text["model_type"]) == (
        ["Qwen3_5MoeForConditionalGeneration"], "qwen3_5_moe", "qwen3_5_moe_text")
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"] + \
        ["linear_attention"] * 3 + ["full_attention"]
    assert (text["mtp_num_hidden_layers"], text["num_experts"], text["num_experts_per_tok"],
            text["linear_num_value_heads"], text["num_key_value_heads"], text["head_dim"]) == (
        1, 128, 10, 64, 2, 256)
    assert text["eos_token_id"] == cfg["eos_token_id"]  # the engine reads the text config's
    assert json.loads((out / "preprocessor_config.json").read_text())["merge_size"] == \
        cfg["vision_config"]["spatial_merge_size"]
    assert (out / "video_preprocessor_config.json").is_file()
    m = load_model("kvbench/qwen3.5-397b-a17b-scaled")
    assert (m.full_layers, m.linear_layers, m.mtp_layers, m.num_experts) == (2, 6, 1, 128)
    pools = {p.name: p for p in m.kv_pools(1)}
    assert pools["mamba"].fixed_bytes_per_request_per_rank == 25_608_192
    assert {p.name: p for p in m.kv_pools(1, state_dtype="bf16")}[
        "mamba"].fixed_bytes_per_request_per_rank == 13_025_280
    assert pools["kv"].bytes_per_token_per_rank == 2 * 2 * 2 * 256 * 2


def test_the_scaled_deepseek_v3_keeps_the_checkpoints_mla_moe_and_nextn_shapes(tmp_path):
    """DeepSeek-V3 at 4 layers (1 dense + 3 MoE) and 64 routed experts, bf16: the checkpoint's
    config.json keys and per-layer shapes (src/kvbench/models/data/hf-config/README.md); SGLang
    0.5.17 serves it as DeepseekV3ForCausalLM with a DeepseekV3ForCausalLMNextN draft of one
    layer (benchmarks/gpu/mla/cpu_check.txt). kvbench's profile caches the MLA latent, (512 +
    64) x 2 B per layer, and the draft's one layer beside it."""
    from transformers import AutoConfig, AutoTokenizer

    from kvbench.models import load_model

    out = tmp_path / "dsv3"
    res = kvbench("dummy-model", str(out), "--model", "deepseek-v3-scaled")
    assert res.returncode == 0, res.stderr
    cfg = AutoConfig.from_pretrained(out)  # transformers' own deepseek_v3 configuration
    assert (type(cfg).__name__, cfg.architectures, cfg.model_type) == (
        "DeepseekV3Config", ["DeepseekV3ForCausalLM"], "deepseek_v3")
    assert (cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim,
            cfg.v_head_dim, cfg.num_attention_heads, cfg.hidden_size) == (
        1536, 512, 128, 64, 128, 128, 7168)
    assert (cfg.num_hidden_layers, cfg.first_k_dense_replace, cfg.n_routed_experts,
            cfg.n_shared_experts, cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group,
            cfg.moe_intermediate_size, cfg.routed_scaling_factor, cfg.vocab_size) == (
        4, 1, 64, 1, 8, 8, 4, 2048, 2.5, 129_280)
    raw = json.loads((out / "config.json").read_text())
    assert (raw["scoring_func"], raw["topk_method"], raw["num_nextn_predict_layers"],
            raw["rope_scaling"]["type"], raw["rope_scaling"]["factor"]) == (
        "sigmoid", "noaux_tc", 1, "yarn", 40)
    assert "quantization_config" not in raw  # bf16: fp8 block GEMMs want deep_gemm
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == 129_280 and raw["eos_token_id"] == tok.convert_tokens_to_ids("<|im_end|>")
    m = load_model("kvbench/deepseek-v3-scaled")
    assert m.attention_kind == "mla" and (m.num_layers, m.mtp_layers, m.num_experts) == (4, 1, 64)
    pools = {p.name: p for p in m.kv_pools(1)}
    assert pools["kv"].bytes_per_token_per_rank == 4 * (512 + 64) * 2
    assert pools["draft_kv"].bytes_per_token_per_rank == (512 + 64) * 2
    # parameters from the shapes: MLA projections, one dense MLP, 4 MoE blocks (3 + the
    # NextN layer) of 64 experts, embedding and head: 14.74 B, 29.5 GB in bf16
    assert m.total_params == pytest.approx(14.74e9, rel=0.001)

