"""Build a random-weight model of a real architecture's shape, offline, plus a small local
BPE tokenizer, into a directory that `transformers serve` and kvbench's prompt synthesis load.

    python benchmarks/gpu/build_random_model.py OUT_DIR [--shape qwen3-8b] [--device cuda]

The weights are random (no download is possible on the GPU machine), so outputs are noise;
timings depend only on the shape. lm_head rows of special tokens and of ids past the
tokenizer's vocabulary are zeroed and the rest scaled up, so greedy decoding emits visible
words, and EOS is disabled so every request runs to max_tokens (like ignore_eos)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SHAPES = {
    # Qwen/Qwen3-8B config.json, except max_position_embeddings (40960 there) raised so the
    # 100K-token agent prompts fit; RoPE is computed, so the longer range costs nothing
    "qwen3-8b": dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=262144, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
    "tiny": dict(
        vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=262144, tie_word_embeddings=False,
    ),
}
TOKENIZER_VOCAB = 8192
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_WORDS = (  # noqa: SIM905 (a paragraph reads better than 150 quoted words)
    "the of and to in is it that for on with as was at by be this are from or have an they "
    "which one you had not but what all were when we there can said each she do how their if "
    "will up other about out many then them these so some her would make like him into time has "
    "look two more write go see number no way could people my than first water been call who "
    "oil its now find long down day did get come made may part code file test function return "
    "value error build server client cache block token model request import class self data "
    "path list dict string int float none true false print open read write line check run "
    "start stop wait send load save keep move copy page host device memory layer batch queue"
).split()


def _corpus() -> list[str]:
    # deterministic text where every word recurs in many contexts, so each becomes one token
    n = len(_WORDS)
    return [" ".join(_WORDS[(i * 13 + j * 7) % n] for j in range(32)) for i in range(4000)]


def build_tokenizer(out_dir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB, special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def build(out_dir: Path, shape: str, device: str, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tok = build_tokenizer(out_dir)
    config = Qwen3Config(
        **SHAPES[shape], bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, dtype="bfloat16",
    )
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.bfloat16)  # init straight in bf16: half the memory and time
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        head = model.lm_head.weight
        head.mul_(20.0)
        head[len(tok):].zero_()
        for tid in tok.all_special_ids:
            head[tid].zero_()
    model.save_pretrained(out_dir)
    gen = json.loads((out_dir / "generation_config.json").read_text())
    gen.update({"eos_token_id": None, "do_sample": False})
    (out_dir / "generation_config.json").write_text(json.dumps(gen, indent=2))
    params = sum(p.numel() for p in model.parameters())
    print(f"built {shape}: {params / 1e9:.2f} B params, tokenizer {len(tok)} tokens, "
          f"{time.perf_counter() - t0:.1f} s -> {out_dir}", flush=True)
    return out_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    build(args.out_dir, args.shape, args.device)


if __name__ == "__main__":
    main()
