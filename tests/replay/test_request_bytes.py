"""The bytes a server receives are the replay's contract: a prefix cache reuses a session's
context only where the prompts are byte-identical, and a change in how prompts are rendered or
bodies assembled (incremental rendering, shared pieces) must not move a single byte.

Each case replays a fixed workload (seeded synthetic sessions with subagents, a Claude Code
trace with rescaled blocks, the AgentX traces from a sampled start as token ids, Mooncake
rows, recycled passes) against a raw HTTP server that records the SHA-256 of every request
body with the session header; the multiset must equal what kvbench's code before the
incremental prompts (main at 2dcba83) sent, in `tests/data/replay/request-bytes.json`.

Regenerate (only when the request format changes on purpose):
    PYTHONPATH=src:tests python tests/replay/test_request_bytes.py --write"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from fixtures.body_recorder import Recorder

from kvbench.replay import ReplayConfig, replay
from kvbench.workload import SyntheticSpec

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "replay" / "request-bytes.json"
TRACES = DATA / "traces"
MARKER = "request-bytes"
def _tokenizer(tmp: Path) -> str:
    from fixtures.tiny_model import build_tokenizer

    out = tmp / "tok"
    if not out.exists():
        build_tokenizer(out)
    return str(out)


def cases(tmp: Path) -> dict[str, dict]:
    """Each case's replay options (every one sends each turn once, or a fixed prefix of the
    run's order, so the multiset does not depend on timing)."""
    tok = _tokenizer(tmp)
    return {
        # fallback words, subagent trees alongside their parents, two lanes
        "synthetic-trees": {
            "synthetic": SyntheticSpec(num_sessions=3, seed=3, scale=0.01, max_turns=5,
                                       subagent_prob=0.5, output_mu=0.0, output_sigma=0.0),
            "concurrency": 2},
        # recycled passes: each pass in its own hash namespace
        "synthetic-recycled": {
            "synthetic": SyntheticSpec(num_sessions=2, seed=5, scale=0.01, max_turns=3,
                                       subagent_prob=0.0, output_mu=0.0, output_sigma=0.0),
            "concurrency": 1, "max_requests": 9},
        # a Claude Code trace with the tokenizer's words, blocks rescaled to 16 tokens
        "claude-code-rescaled": {
            "trace": [TRACES / "claude-code" / "trace_0165.json.gz"], "tokenizer": tok,
            "block_tokens": 16, "concurrency": 1},
        # the AgentX traces from a sampled start (t* warm-up requests), as token ids
        "agentx-token-ids": {
            "trace": [TRACES / "agentx-small"], "endpoint": "completions", "tokenizer": tok,
            "start": "sampled", "start_ratio": (0.25, 0.75), "seed": 42, "concurrency": 2},
        # Mooncake rows (512-token blocks ending inside the last block), one lane
        "mooncake": {
            "trace": [TRACES / "mooncake" / "conversation_trace.jsonl.gz"],
            "concurrency": 1, "max_requests": 6},
    }


async def _record(opts: dict, out: Path) -> list[str]:
    rec = Recorder()
    srv = await asyncio.start_server(rec.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    cfg = ReplayConfig(url=f"http://127.0.0.1:{port}", model="m", output_dir=out,
                       run_marker=MARKER, think_time_scale=0, max_tokens_cap=4,
                       **opts)
    async with srv:
        summary = await replay(cfg)
    assert summary["requests"]["errors"] == 0
    return sorted(rec.seen)


def digests(tmp: Path) -> dict[str, list[str]]:
    return {name: asyncio.run(_record(opts, tmp / name))
            for name, opts in cases(tmp).items()}


@pytest.fixture(scope="module")
def sent(tmp_path_factory) -> dict[str, list[str]]:
    return digests(tmp_path_factory.mktemp("request-bytes"))


@pytest.mark.parametrize("case", ["synthetic-trees", "synthetic-recycled",
                                  "claude-code-rescaled", "agentx-token-ids", "mooncake"])
def test_every_request_body_is_byte_identical_to_before(sent, case):
    golden = json.loads(GOLDEN.read_text())["cases"][case]
    assert len(sent[case]) == len(golden)
    assert sent[case] == golden


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: PYTHONPATH=src:tests python tests/replay/test_request_bytes.py --write")
    import tempfile

    import kvbench

    with tempfile.TemporaryDirectory() as tmp:
        out = {"written_by": f"tests/replay/test_request_bytes.py --write ({kvbench.__file__})",
               "cases": digests(Path(tmp))}
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(out, indent=1) + "\n")
    print({k: len(v) for k, v in out["cases"].items()})
