"""The `--trace` option of every command that replays or predicts (`replay`, `simulate`,
`simulate-jobs`, `capacity`, `plan --predict`): one spelling and one help text. Light (no
kvbench.workload import): the words are resolved by workload/choice.py when the command
runs."""

from __future__ import annotations

TRACE_HELP = ("Trace file or directory (kv-cache-tester / weka JSON or JSONL, Mooncake JSONL; "
              "repeatable), or a word: agentx (the AgentX-shaped corpus sized to the row), "
              "bundled (kvbench's Claude Code sessions; may be given with files), synthetic "
              "(seeded synthetic sessions)")
