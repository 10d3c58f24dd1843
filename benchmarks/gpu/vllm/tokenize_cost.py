"""What vLLM 0.26's API server spends per prompt token before its engine sees a request: the
chat template and the HF fast tokenizer (vllm/renderers/hf.py safe_apply_chat_template;
vllm/renderers/base.py:471-486 `_tokenize_prompt`, run in the renderer's thread pool,
:87-99), on prompts made as kvbench's replay makes them (workload/prompt.py: single-token
words drawn from the tokenizer's own vocabulary) with the tokenizer of the dummy model the
H200 runs served (`kvbench dummy-model DIR --model qwen3-8b`).

    PYTHONPATH=src python -m kvbench dummy-model /tmp/m --model qwen3-8b
    PYTHONPATH=src python benchmarks/gpu/vllm/tokenize_cost.py /tmp/m

Prints the median time of each prompt size and its cost per prompt token (the vllm engine
profile's prompt_token_overhead_s). Measured on this machine's CPU, not the H200 host's."""

from __future__ import annotations

import argparse
import statistics
import time

from transformers import AutoTokenizer

from kvbench.workload.prompt import Vocabulary

SIZES = (512, 4096, 16384, 32000)  # the probe's prompt sizes


def time_prompt(tok, vocab: Vocabulary, tokens: int, repeats: int) -> tuple[int, float]:
    """(tokens after the chat template, median seconds to template and tokenize)."""
    text = "".join(vocab.words[i] for i in vocab.draw(tokens, tokens))
    messages = [{"role": "user", "content": text}]
    times, n = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        n = len(tok(rendered, add_special_tokens=False)["input_ids"])
        times.append(time.perf_counter() - t0)
    return n, statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", help="a tokenizer directory (kvbench dummy-model)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.model_dir)
    vocab = Vocabulary(a.model_dir)
    per_token = []
    print("prompt  tokens  median ms  us/token")
    for size in a.sizes:
        n, s = time_prompt(tok, vocab, size, a.repeats)
        per_token.append(s / n)
        print(f"{size:6d} {n:7d} {s * 1e3:10.2f} {s / n * 1e6:9.3f}")
    print(f"median per token: {statistics.median(per_token) * 1e6:.3f} us")


if __name__ == "__main__":
    main()
