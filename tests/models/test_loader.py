from __future__ import annotations

import json

import pytest
import yaml

from kvbench.errors import ModelError
from kvbench.models import ModelProfile, load_model, model_names
from kvbench.models.loader import DATA_DIR

AGENTIC_MODELS = [
    "MiniMaxAI/MiniMax-M3-MXFP8", "Qwen/Qwen3.5-397B-A17B-FP8", "amd/GLM-5.2-MXFP4",
    "amd/MiniMax-M3-MXFP4", "amd/Qwen3.5-397B-A17B-MXFP4", "deepseek-ai/DeepSeek-V4-Pro",
    "moonshotai/Kimi-K3", "nvidia/GLM-5.2-NVFP4", "nvidia/MiniMax-M3-NVFP4",
    "nvidia/Qwen3.5-397B-A17B-NVFP4", "nvidia/Qwen3.5-397B-A17B-NVFP4-V2", "zai-org/GLM-5.2-FP8",
]


@pytest.mark.parametrize("name", AGENTIC_MODELS)
def test_every_agentic_model_resolves(name):
    assert load_model(name).num_layers > 0


def test_agentic_models_are_all_in_the_real_configs(shared_data):
    text = "".join(p.read_text() for p in (shared_data / "inferencex").glob("*-master.yaml"))
    for name in AGENTIC_MODELS:
        assert f"model: {name}" in text


def test_extra_models_are_covered():
    for name in ("Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-32B", "Qwen3-8B", "DeepSeek-V3",
                 "gpt-oss-120b"):
        assert name in model_names()
    assert load_model("Qwen/Qwen3-8B").num_kv_heads == 8


def test_quantisation_suffix_resolves_to_the_base():
    assert load_model("nvidia/Qwen3.5-397B-A17B-NVFP4-V2") is load_model("Qwen/Qwen3.5-397B-A17B")
    # a version in the name is not a quantisation suffix
    assert load_model("deepseek-ai/DeepSeek-V3").name == "DeepSeek-V3"


def test_unknown_model_says_how_to_add_one():
    with pytest.raises(ModelError) as e:
        load_model("acme/Imaginary-9T")
    assert "known:" in e.value.message and "config.json" in e.value.hint


def test_every_profile_number_has_a_source():
    for path in DATA_DIR.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        del data["sources"]["num_layers"]
        with pytest.raises(ValueError, match="num_layers"):
            ModelProfile.model_validate(data)


def test_weight_bytes():
    assert load_model("llama-3.1-8b").weight_bytes("bf16") == 2 * 8_030_000_000
    assert load_model("minimax-m3").weight_bytes("fp4") == 250_000_000_000  # published size
    with pytest.raises(ModelError):
        load_model("llama-3.1-8b").weight_bytes("int3")


def test_local_config_json(tmp_path):
    cfg = {
        "model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "vocab_size": 151936, "full_attention_interval": 4, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    assert (m.full_layers, m.linear_layers) == (12, 36)
    # Qwen3-Next-80B-A3B: 12 full layers x 2 x 2 heads x 256 x 2 B = 24,576 (kvoffload 6.2)
    assert m.kv_bytes_per_token(1) == 24_576
    assert "total_params" in m.estimated
    assert load_model(str(tmp_path)).num_layers == 48  # a checkpoint directory works too


def test_bad_local_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 2}))
    with pytest.raises(ModelError, match="lacks field"):
        load_model(str(path))
