"""Each malformed recipe gives one clear line: file:line, config key, YAML path, bad value,
allowed values."""

from __future__ import annotations

import pytest
from fixtures.recipes import MULTI, SINGLE

AG = ("scenarios", "agentic-coding", 0, "search-space")


def _row(data: dict, i: int, key: str = SINGLE) -> dict:
    return data[key]["scenarios"]["agentic-coding"][0]["search-space"][i]


def _fixed(data: dict) -> dict:
    return data[SINGLE]["scenarios"]["fixed-seq-len"][0]["search-space"][0]


def _set(target, **kv):
    target.update({k.replace("_", "-"): v for k, v in kv.items()})


CASES = [
    ("backend-name",
     lambda d: _row(d, 2)["kv-offload-backend"].update(name="hicahe"),
     [f"{SINGLE}.agentic-coding[0].search-space[2].kv-offload-backend.name",
      "'hicahe' is not allowed", "allowed: 'hicache', 'vllm-native'", "did you mean 'hicache'"]),
    ("unknown-row-key",
     lambda d: _row(d, 0).update({"conc-lst": [1]}),
     [".search-space[0].conc-lst", "unknown key 'conc-lst'", "did you mean 'conc-list'"]),
    ("unknown-top-key",
     lambda d: d[SINGLE].update(modle="x"),
     [f"{SINGLE}.modle", "did you mean 'model'", "allowed keys: image, model"]),
    ("snake-case-key",
     lambda d: d[SINGLE].update(model_prefix=d[SINGLE].pop("model-prefix")),
     [f"{SINGLE}.model_prefix", "did you mean 'model-prefix'"]),
    ("trace-source-rejected",
     lambda d: d[SINGLE]["scenarios"]["agentic-coding"][0].update({"trace-source": "weka"}),
     [f"{SINGLE}.agentic-coding[0].trace-source", "unknown key 'trace-source'"]),
    ("spec-decoding",
     lambda d: _row(d, 0).update({"spec-decoding": "eagle"}),
     [".search-space[0].spec-decoding", "'eagle' is not allowed",
      "allowed: 'mtp', 'draft_model', 'none'"]),
    ("kv-offloading-value",
     lambda d: _row(d, 0).update({"kv-offloading": "ssd"}),
     [".search-space[0].kv-offloading", "'ssd' is not allowed", "allowed: 'none', 'dram'"]),
    ("backend-with-none",
     lambda d: _row(d, 0).update({"kv-offload-backend": {"name": "hicache"}}),
     [".search-space[0]", "'kv-offload-backend' (hicache) is only allowed with",
      "'kv-offloading: dram'"]),
    ("dram-without-backend",
     lambda d: _row(d, 2).pop("kv-offload-backend"),
     [".search-space[2]", "'kv-offloading: dram' requires 'kv-offload-backend'"]),
    ("single-node-needs-kv-offloading",
     lambda d: _row(d, 0).pop("kv-offloading"),
     [".search-space[0]", "must set 'kv-offloading' (allowed: none, dram)"]),
    ("dram-needs-utilization",
     lambda d: d[SINGLE]["scenarios"]["agentic-coding"][0].pop("dram-utilization"),
     [f"{SINGLE}.agentic-coding[0]", "rows [2] use 'kv-offloading: dram'",
      "'dram-utilization' in (0, 1]"]),
    ("utilization-above-one",
     lambda d: d[SINGLE]["scenarios"]["agentic-coding"][0].update({"dram-utilization": 1.5}),
     [".agentic-coding[0].dram-utilization", "must be <= 1, got 1.5"]),
    ("utilization-zero",
     lambda d: d[SINGLE]["scenarios"]["agentic-coding"][0].update({"dram-utilization": 0}),
     [".agentic-coding[0].dram-utilization", "must be > 0, got 0"]),
    ("conc-list-and-range",
     lambda d: _set(_row(d, 0), conc_start=1, conc_end=4),
     [".search-space[0]", "either 'conc-list' or 'conc-start'/'conc-end', not both"]),
    ("no-concurrency",
     lambda d: _row(d, 0).pop("conc-list"),
     [".search-space[0]", "needs 'conc-list' or both 'conc-start' and 'conc-end'"]),
    ("half-range",
     lambda d: _row(d, 1).pop("conc-end"),
     [".search-space[1]", "'conc-end' is missing"]),
    ("range-reversed",
     lambda d: _set(_row(d, 1), conc_start=32, conc_end=4),
     [".search-space[1]", "'conc-start' (32) must be <= 'conc-end' (4)"]),
    ("non-positive-conc",
     lambda d: _row(d, 0).update({"conc-list": [1, 0, -4]}),
     [".search-space[0]", "'conc-list' entries must be > 0 (got [0, -4])"]),
    ("conc-not-int",
     lambda d: _row(d, 0).update({"conc-list": [1, "four"]}),
     [".search-space[0].conc-list[1]", "expected an integer, got 'four' (str)"]),
    ("tp-zero",
     lambda d: _row(d, 0).update(tp=0),
     [".search-space[0].tp", "must be > 0, got 0"]),
    ("tp-string",
     lambda d: _row(d, 0).update(tp="4"),
     [".search-space[0].tp", "expected an integer, got '4' (str)"]),
    ("dcp-divides-tp",
     lambda d: _row(d, 0).update({"dcp-size": 3}),
     [".search-space[0]", "'tp' (4) must be divisible by 'dcp-size' (3)"]),
    ("pp-zero",
     lambda d: _row(d, 0).update(pp=0),
     [".search-space[0].pp", "must be > 0, got 0"]),
    ("dp-attn-not-bool",
     lambda d: _row(d, 0).update({"dp-attn": "yes"}),
     [".search-space[0].dp-attn", "expected true or false, got 'yes'"]),
    ("agentic-needs-cluster-runner",
     lambda d: d[SINGLE].update(runner="b300"),
     [f"{SINGLE}.runner", "'cluster:<name>' runner", "(got runner 'b300')"]),
    ("multinode-flag",
     lambda d: d[SINGLE].update(multinode="no"),
     [f"{SINGLE}.multinode", "'no' is not allowed (allowed: false)"]),
    ("missing-model",
     lambda d: d[SINGLE].pop("model"),
     [f"{SINGLE}.model", "required key 'model' is missing"]),
    ("no-scenario",
     lambda d: d[SINGLE].update(scenarios={}),
     [f"{SINGLE}.scenarios", "at least one scenario"]),
    ("unknown-scenario",
     lambda d: d[SINGLE]["scenarios"].update({"agentic": []}),
     [f"{SINGLE}.scenarios.agentic", "did you mean 'agentic-coding'"]),
    ("router-version-image",
     lambda d: _row(d, 0).update(router={"name": "sglang-router", "version": "image:v1"}),
     [".search-space[0].router.version", "not an image reference"]),
    ("router-needs-version",
     lambda d: _row(d, 0).update(router={"name": "sglang-router"}),
     [".search-space[0].router.version", "required key 'version' is missing"]),
    ("router-both-scopes",
     lambda d: (d[SINGLE].update(router={"name": "r", "version": "1"}),
                _row(d, 0).update(router={"name": "r", "version": "1"})),
     [".search-space[0].router", "declared at the top level and in this row"]),
    ("backend-extra-key",
     lambda d: _row(d, 2)["kv-offload-backend"].update(size="10GB"),
     [".search-space[2].kv-offload-backend.size", "did you mean 'size-gb-per-rank'"]),
    ("p2p-on-single-node",
     lambda d: d[SINGLE].update({"kv-p2p-transfer": "nixl"}),
     [f"{SINGLE}.kv-p2p-transfer", "only valid with 'multinode: true'"]),
    ("disagg-needs-transfer",
     lambda d: d[MULTI].pop("kv-p2p-transfer"),
     [f"{MULTI}.agentic-coding[0].search-space[0]",
      "'disagg: true' requires 'kv-p2p-transfer'"]),
    ("worker-hardware-pair",
     lambda d: _row(d, 0, MULTI)["prefill"].update(hardware="gb200"),
     [f"{MULTI}.agentic-coding[0].search-space[0]",
      "'hardware' must be given for both 'prefill' and 'decode'"]),
    ("multinode-row-pp",
     lambda d: _row(d, 0, MULTI).update(pp=2),
     ["multi-node agentic rows cannot set pp at row level"]),
    ("multinode-row-with-tp",
     lambda d: _row(d, 0, MULTI).update(tp=8),
     ["exactly one topology: 'tp' (single node), both 'prefill' and 'decode', or 'worker'"]),
    ("single-node-entry-with-workers",
     lambda d: (_row(d, 0).pop("tp"),
                _row(d, 0).update(prefill=_row(d, 0, MULTI)["prefill"],
                                  decode=_row(d, 0, MULTI)["decode"])),
     [f"{SINGLE}.agentic-coding[0].search-space[0]",
      "rows of a 'multinode: false' entry use 'tp'"]),
    ("worker-missing-ep",
     lambda d: _row(d, 0, MULTI)["decode"].pop("ep"),
     [f"{MULTI}.agentic-coding[0].search-space[0].decode.ep", "required key 'ep' is missing"]),
    ("additional-settings-format",
     lambda d: _row(d, 0, MULTI)["prefill"].update({"additional-settings": ["PREFILL_NODES"]}),
     [".prefill.additional-settings", "KEY=VALUE"]),
    ("fixed-isl-negative",
     lambda d: d[SINGLE]["scenarios"]["fixed-seq-len"][0].update(isl=-1),
     [f"{SINGLE}.fixed-seq-len[0].isl", "must be > 0, got -1"]),
    ("fixed-row-kv-offloading",
     lambda d: _fixed(d).update({"kv-offloading": "dram"}),
     [f"{SINGLE}.fixed-seq-len[0].search-space[0].kv-offloading", "unknown key"]),
    ("entry-not-mapping",
     lambda d: d.update({"broken-key": [1, 2]}),
     ["broken-key: expected a mapping, got [1, 2] (list)"]),
]


@pytest.mark.parametrize("mutate,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_recipe_message(recipe_errors, mutate, expected):
    errors = recipe_errors(mutate)
    assert len(errors) == 1, errors
    line = errors[0]
    assert "master.yaml:" in line.split(": ")[0]
    for part in expected:
        assert part in line, f"{part!r} not in {line!r}"


def test_all_errors_reported_in_one_pass(recipe_errors):
    def several(d):
        _row(d, 0).update(tp=0)
        _row(d, 1).update({"spec-decoding": "eagle"})
        d[MULTI].update(imgae="x")

    errors = recipe_errors(several)
    assert len(errors) == 3
    assert any(".search-space[0].tp" in e for e in errors)
    assert any(".search-space[1].spec-decoding" in e for e in errors)
    assert any(f"{MULTI}.imgae" in e for e in errors)


def test_error_points_at_the_yaml_line(recipe_errors, tmp_path):
    errors = recipe_errors(lambda d: _row(d, 2)["kv-offload-backend"].update(name="x"))
    where = errors[0].split(": ")[0]
    line_no = int(where.rsplit(":", 1)[1])
    text = (tmp_path / "master.yaml").read_text().splitlines()[line_no - 1]
    assert "name: x" in text
