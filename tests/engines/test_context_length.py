"""Agentic launches run at the model's native context (the InferenceX policy: benchmark_lib.sh
unsets MAX_MODEL_LEN for every agentic script, because a cap makes the server reject the
long turns the traces hold). Over every agentic row of the real master configs, each worker
of the multi-node ones included: no context flag unless a model rule sets it, and then to the
model profile's native length. Also no argv value that an unset variable would leave
behind (the seeds' `--max-model-len $MAX_MODEL_LEN` with the variable unbound)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.engines import get_adapter
from kvbench.engines.rules import load_engine_data
from kvbench.errors import EngineError
from kvbench.matrix import Job, Selection, select_jobs
from kvbench.models import load_model
from kvbench.plan import plan_job
from kvbench.recipe import load_runners
from kvbench.sweep.options import RunOptions

# The flags and config keys that cap a server's context, per engine (each engine's own
# server arguments: sglang --context-length, vllm --max-model-len, TRT-LLM max_seq_len).
CONTEXT_FLAGS = {"sglang": ("--context-length",), "vllm": ("--max-model-len",),
                 "trtllm": ("--max_seq_len", "--max-seq-len")}
CONTEXT_CONFIG_KEYS = ("max_seq_len", "max_input_len")
UNBOUND = re.compile(r"^$|^None$|\$\{?[A-Za-z_]|^null$")


def _shape(job: Job) -> str:
    row = {k: v for k, v in job.row.items() if k not in ("conc", "exp-name")}
    return job.config_key + json.dumps(row, sort_keys=True)


def agentic_launch_rows() -> list[Job]:
    """One job per agentic search-space row (its first concurrency). A multi-node row is one
    job: its adapter builds every worker (engines/disaggregation.py for sglang-disagg,
    engines/dynamo.py from the srt-slurm recipe for the Dynamo frameworks and multi-node
    vLLM)."""
    jobs = select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS))
    seen, out = set(), []
    for job in jobs:
        if _shape(job) in seen:
            continue
        seen.add(_shape(job))
        out.append(job)
    return out


def adapter_of(job: Job):
    """The adapter `kvbench launch` builds the row with (cli/launch_render.py build_all)."""
    return get_adapter(job.framework, multinode=job.is_multinode)


ROWS = agentic_launch_rows()


def _model_rule(engine: str, detail: str) -> bool:
    """Whether the source `detail` ("<framework> data: <rule>") names a rule that matches on
    the model (model-prefix or model)."""
    name = detail.split(" data: ", 1)[-1].split(";", 1)[0]
    rules = {r.name: r for r in load_engine_data(engine).rules}
    rule = rules.get(name)
    return rule is not None and (rule.when.model_prefix is not None or
                                 rule.when.model is not None)


def test_the_catalog_is_covered():
    engines = Counter(adapter_of(job).name for job in ROWS)
    # every engine with context flags is exercised by real rows, and every row has an adapter
    assert set(engines) == {"sglang", "vllm", "trtllm", "atom", "sglang-disagg", "dynamo"}, \
        engines
    assert sum(engines.values()) == len(ROWS) > 200  # a multi-node row counts once


def test_no_agentic_launch_caps_the_context_below_native():
    runners = load_runners(RUNNERS)
    problems, capped = [], Counter()
    refused = []
    for job in ROWS:
        adapter = adapter_of(job)
        try:
            spec = adapter.build(job, plan_job(job, runners), port=30000, runners=runners)
        except EngineError as e:
            # a refusal (`kvbench launch` lists it as skipped); only a recipe row has one: no
            # recipe in the checkout, a field srtctl rejects, a frontend other than Dynamo's
            assert adapter.name == "dynamo", (job.exp_name, e.message)
            refused.append(e.message)
            continue
        native = load_model(job.row["model"]).native_context_tokens
        where = f"{job.config_key} {job.exp_name}"
        # a disaggregated row: every worker's command line (sglang-disagg: SGLang servers,
        # with kvbench's sources; a recipe row: the recipe's flags, which have none)
        servers = ([(w.engine_args, w.sources) for w in spec.workers] if spec.workers
                   else [(spec.engine_args, spec.sources)])
        engine = "sglang" if spec.engine == "sglang-disagg" else spec.engine
        bad = [a for args, _ in servers for a in args if UNBOUND.search(str(a))]
        if bad:
            problems.append(f"{where}: argv values left by an unset variable: {bad}")
        for src in (s for _, sources in servers for s in sources):
            flag = src.flag.rsplit(".", 1)[-1]
            is_cap = (src.kind == "arg" and flag in CONTEXT_FLAGS.get(engine, ())) or (
                src.kind == "file" and flag in CONTEXT_CONFIG_KEYS)
            if not is_cap or src.value == "(removed)":  # a rule took the flag out
                continue
            capped[spec.engine] += 1
            if not _model_rule(adapter.data_name, src.detail):
                problems.append(f"{where}: {src.flag} {src.value} is set by {src.detail!r}, "
                                "not by a model rule")
            elif native is None or int(str(src.value)) != native:
                problems.append(f"{where}: {src.flag} {src.value} is not the model's native "
                                f"context ({native})")
        for name, text in spec.files.items():
            if name.endswith((".yaml", ".yml")):
                config = yaml.safe_load(text) or {}
                for key in CONTEXT_CONFIG_KEYS:
                    if key in config and (native is None or config[key] != native):
                        problems.append(f"{where}: {name} {key} {config[key]} is not the "
                                        f"model's native context ({native})")
    assert not problems, "\n".join(problems[:20])
    assert len(refused) < len(ROWS) // 4, refused[:5]
    # the model rules that do set a context set it on their rows (DSV4 on vLLM and on the
    # disaggregated SGLang workers, MiniMax-M3 on TRT-LLM, GLM-5.2 on SGLang MI325X as its
    # launcher does), and nothing else does
    assert set(capped) == {"vllm", "trtllm", "sglang", "sglang-disagg"}, capped


def test_the_client_does_not_cap_prompts_by_default():
    # the replay's own context guard (skipping turns longer than a limit) is opt-in
    assert RunOptions().max_input_tokens is None


@pytest.mark.parametrize("engine", sorted(CONTEXT_FLAGS))
def test_context_rules_name_a_model(engine):
    """Data-level guard: a rule that sets a context flag must be a model rule."""
    for rule in load_engine_data(engine).rules:
        sets = set(rule.args) & set(CONTEXT_FLAGS[engine]) | set(rule.config) & set(
            CONTEXT_CONFIG_KEYS)
        if sets:
            assert rule.when.model_prefix is not None or rule.when.model is not None, rule.name
