"""Real traces replayed against a real `transformers serve` (CPU, tiny offline model): every
record is checked against the server's reported usage."""

from __future__ import annotations

import pytest
from conftest import TRACES

from kvbench.files import read_jsonl
from kvbench.replay import ReplayConfig, run_replay

pytestmark = pytest.mark.slow


def _template_overhead(model_dir) -> int:
    from transformers import AutoTokenizer  # not at collection: every xdist worker collects

    tok = AutoTokenizer.from_pretrained(model_dir)
    msgs = [{"role": "user", "content": " the"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    return len(ids) - 1


def test_claude_code_trace_chat(tf_server, tiny_model, tmp_path):
    cfg = ReplayConfig(url=tf_server, model=str(tiny_model), concurrency=2, max_requests=6,
                       warmup_requests=1, output_dir=tmp_path, tokenizer=str(tiny_model),
                       trace=[TRACES / "claude-code" / "trace_0165.json.gz",
                              TRACES / "claude-code" / "trace_0019.json.gz"],
                       block_tokens=1, max_tokens_cap=6, think_time_cap_s=0.0,
                       request_timeout_s=60)
    summary = run_replay(cfg)
    recs = read_jsonl(tmp_path / "records.jsonl")
    assert len(recs) == 7
    overhead = _template_overhead(tiny_model)
    for r in recs:
        assert r["status"] == "ok", r
        # the server's usage is the truth; the prompt we synthesised has exactly the tokens
        # we meant, plus the chat template's fixed overhead
        assert r["prompt_tokens"] == r["sent_prompt_tokens"] + overhead
        assert r["completion_tokens"] == r["max_tokens"]  # EOS disabled in the tiny model
        assert sum(r["chunk_tokens"]) == r["completion_tokens"]
        assert r["cached_tokens"] is None  # transformers serve reports no prefix cache
        assert len(r["chunk_ns"]) >= 1 and r["t_first_ns"] > r["t_send_ns"]
    # the server refuses ignore_eos (HTTP 422): the client drops it once and says so
    assert any("ignore_eos" in n for n in summary["run"]["notes"])
    assert summary["requests"]["errors"] == 0
    assert summary["requests"]["profiled"] == 6


def test_mooncake_trace_completions(tf_server, tiny_model, tmp_path):
    cfg = ReplayConfig(url=tf_server, model=str(tiny_model), endpoint="completions",
                       concurrency=2, max_requests=4, output_dir=tmp_path,
                       tokenizer=str(tiny_model), token_ids=False,
                       trace=[TRACES / "mooncake" / "conversation_trace.jsonl.gz"],
                       block_tokens=8, max_input_tokens=400, max_tokens_cap=5,
                       ignore_eos=False, request_timeout_s=60)
    run_replay(cfg)
    recs = read_jsonl(tmp_path / "records.jsonl")
    assert len(recs) == 4
    for r in recs:
        assert r["status"] == "ok", r
        assert r["prompt_tokens"] == r["sent_prompt_tokens"]  # no template on completions
        assert r["completion_tokens"] == r["max_tokens"] == sum(r["chunk_tokens"])
