"""`kvbench recipe mirror` on copies of the real InferenceX master configs and changelog."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.inferencex import INFERENCEX
from fixtures.launcher import install_stand_in

from kvbench.changelog import check_files, parse_changelog
from kvbench.cli import main

AMD_KEY = "qwen3.5-fp8-mi325x-sglang-agentic-mtp"  # five resident flow rows, no offload arm
NV_KEY = "glm5.2-fp8-h200-dynamo-sglang-agentic-mtp-2p2d"  # three resident block rows


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """The InferenceX layout: configs/*-master.yaml + runners.yaml, perf-changelog.yaml."""
    (tmp_path / "configs").mkdir()
    for name in ("amd-master.yaml", "nvidia-master.yaml", "runners.yaml"):
        shutil.copyfile(INFERENCEX / name, tmp_path / "configs" / name)
    shutil.copyfile(INFERENCEX / "perf-changelog.yaml", tmp_path / "perf-changelog.yaml")
    # the MI355X Qwen3.5 key's launcher: a stand-in of the shape mirror edits
    install_stand_in(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def mirror(capsys, *args: str) -> str:
    main(["recipe", "mirror", *args])
    return capsys.readouterr().out


def without(lines: list[str], spans: list[tuple[int, int]]) -> list[str]:
    drop = {n for a, b in spans for n in range(a, b)}
    return [line for n, line in enumerate(lines) if n not in drop]


def test_flow_rows_get_one_twin_each_and_nothing_else_changes(repo, capsys):
    old = (repo / "configs" / "amd-master.yaml").read_text().split("\n")
    out = mirror(capsys, "--config-keys", AMD_KEY)
    new = (repo / "configs" / "amd-master.yaml").read_text().split("\n")
    assert out.count("\nadded ") + out.startswith("added ") == 5
    # nothing InferenceX's validation refuses: no patches: block, no size in the rows; the
    # key's launcher is not in this checkout, so its branch is not written (said once)
    assert "patches:" not in "\n".join(new[230:260])
    assert f"{AMD_KEY}: no launcher branch data for hicache twins" in out
    assert len(new) == len(old) + 5
    # resident rows are on lines 233..237; each twin lands right under its row
    twins = [233, 235, 237, 239, 241]  # 0-based indexes of the inserted lines
    assert without(new, [(n, n + 1) for n in twins]) == old
    assert new[233] == ("      - { tp: 2, ep: 2, spec-decoding: mtp, kv-offloading: dram, "
                        "kv-offload-backend: { name: hicache }, conc-list: [1, 4, 6] }")
    assert new[241] == ("      - { tp: 8, ep: 8, spec-decoding: mtp, kv-offloading: dram, "
                        "kv-offload-backend: { name: hicache }, conc-list: "
                        "[4, 16, 24, 32, 40, 48, 64] }")
    # the printed diff is the change: five added lines, none removed
    body = [line for line in out.splitlines() if line[:1] in "+-" and line[:3] not in
            ("+++", "---")]
    assert body == ["+" + new[n] for n in twins]


def test_result_validates_and_changelog_check_passes(repo, capsys):
    mirror(capsys, "--config-keys", AMD_KEY)
    main(["validate", "configs/amd-master.yaml", "configs/runners.yaml"])
    assert "config keys valid" in capsys.readouterr().out
    report = check_files(INFERENCEX / "perf-changelog.yaml", repo / "perf-changelog.yaml",
                         [repo / "configs" / "amd-master.yaml"])
    assert [e.config_keys for e in report.new_entries] == [[AMD_KEY]]
    entry = report.new_entries[0]
    assert entry.scenario_type == ["agentic-coding"]
    assert entry.description[0].startswith("Add hicache DRAM KV-offload arms mirroring 5 "
                                           "GPU-resident agentic rows of " + AMD_KEY)
    assert entry.pr_link.endswith("/pull/" + "X" * 3)
    # the new rows expand into jobs: 3 + 6 + 5 + 11 + 7 concurrencies
    main(["matrix", "--config-files", "configs/amd-master.yaml", "--config-keys", AMD_KEY,
          "--format", "json"])
    import json

    rows = json.loads(capsys.readouterr().out)
    offload = [r for r in rows if r["kv-offloading"] == "dram"]
    assert len(offload) == 32 and len(rows) == 64
    assert {r["kv-offload-backend"]["name"] for r in offload} == {"hicache"}


def test_block_rows_of_a_real_nvidia_key(repo, capsys):
    old = (repo / "configs" / "nvidia-master.yaml").read_text().split("\n")
    mirror(capsys, "--config-keys", NV_KEY, "--config-files", "configs/nvidia-master.yaml")
    new = (repo / "configs" / "nvidia-master.yaml").read_text().split("\n")
    # the three resident rows are 16 lines each from line 8706; a twin is 17 lines (the
    # backend line is added under kv-offloading)
    spans = [(8721, 8738), (8754, 8771), (8787, 8804)]
    assert len(new) == len(old) + 51
    assert without(new, spans) == old
    assert new[8721:8725] == ["      - spec-decoding: mtp", "        conc-list: [8]",
                              "        kv-offloading: dram",
                              "        kv-offload-backend: { name: hicache }"]
    assert new[8725:8738] == old[8708:8721]  # workers copied verbatim
    main(["validate", "configs/nvidia-master.yaml", "configs/runners.yaml"])


def test_second_run_is_a_no_op(repo, capsys):
    mirror(capsys, "--config-keys", AMD_KEY)
    master = (repo / "configs" / "amd-master.yaml").read_bytes()
    log = (repo / "perf-changelog.yaml").read_bytes()
    out = mirror(capsys, "--config-keys", AMD_KEY)
    assert out.count("already has a hicache twin") == 5
    assert (repo / "configs" / "amd-master.yaml").read_bytes() == master
    assert (repo / "perf-changelog.yaml").read_bytes() == log


def test_refused_twins_are_reported_not_written(repo, capsys):
    before = (repo / "configs" / "amd-master.yaml").read_bytes()
    out = mirror(capsys, "--config-keys", AMD_KEY, "--size", "5000")
    assert out.count("not written") == 5
    # TP2: 5000 GB per rank x 2 ranks cannot fit the row's 599 GB budget less 2 x 1 GB headroom
    assert "> 597 GB usable" in out
    assert (repo / "configs" / "amd-master.yaml").read_bytes() == before
    assert len(parse_changelog((repo / "perf-changelog.yaml").read_bytes()).entries) == \
        len(parse_changelog((INFERENCEX / "perf-changelog.yaml").read_bytes()).entries)


def test_wrong_engine_is_refused(repo, capsys):
    out = mirror(capsys, "--config-keys", "kimik3-fp4-h200-vllm-agentic")
    assert "offload backend 'hicache' runs on sglang; framework 'vllm' serves with vllm" in out
    assert (repo / "configs" / "nvidia-master.yaml").read_bytes() == \
        (INFERENCEX / "nvidia-master.yaml").read_bytes()


def test_explicit_size_caps_the_launcher_not_the_row(repo, capsys):
    out = mirror(capsys, "--config-keys", MI355X_KEY, "--size", "40", "--dry-run")
    assert ("+      - { tp: 2, ep: 2, spec-decoding: mtp, kv-offloading: dram, "
            "kv-offload-backend: { name: hicache }, conc-list: [1, 4, 8, 12, 16, 20] }") in out
    assert "+    HICACHE_MAX_SIZE_GB_PER_RANK=${HICACHE_MAX_SIZE_GB_PER_RANK:-40}" in out
    assert out.count("planned host pools 40.0/") == 2 and "(--size)" in out
    assert "dry run: nothing written" in out
    assert (repo / "configs" / "amd-master.yaml").read_bytes() == \
        (INFERENCEX / "amd-master.yaml").read_bytes()


@pytest.mark.parametrize(("args", "message"), [
    (["--config-keys", "qwen3.5-fp8-mi325x-sglang-agentic"], "are in none of"),
    (["--config-keys", AMD_KEY, "--backend", "hicach"], "'hicach' is not an offload backend"),
    (["--config-keys", AMD_KEY, "--size", "-1"], "--size (got '-1'): out of range"),
    # the launcher's bash compares whole GB: 40.5 was written and the cap never applied
    (["--config-keys", "qwen3.5-fp4-mi355x-sglang-agentic-mtp", "--size", "40.5"],
     "--size 40.5: qwen3.5-fp4-mi355x-sglang-agentic-mtp's launcher branch caps the pool in "
     "whole GB"),
])
def test_bad_input_is_one_clear_line(repo, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main(["recipe", "mirror", *args])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


MI355X_KEY = "qwen3.5-fp4-mi355x-sglang-agentic-mtp"  # v0.5.17 image, resident rows only


def test_mi355x_qwen_twins_follow_the_seed_practice(repo, capsys):
    """Seed 000's Qwen3.5 MI355X HiCache arm: page 64, write_through_selective, kernel io,
    page_first, at most 180 GB per rank, the sglang#34560 patch on its v0.5.17 image; the
    rows say only `{ name: hicache }`, the rest is the launcher's branch, and kvbench runs
    what that branch starts (--sizing launcher: plan/data/launcher_sizing.yaml)."""
    from fixtures.inferencex import RUNNERS

    from kvbench.matrix import Selection, select_jobs
    from kvbench.plan import plan_job
    from kvbench.recipe import load_runners

    out = mirror(capsys, "--config-keys", MI355X_KEY)
    assert out.count("runs page 64, write_through_selective, kernel, page_first") == 2
    assert out.count("runs at most 180 GB per rank in the launcher (seed 000") == 2
    old = (INFERENCEX / "amd-master.yaml").read_text()
    text = (repo / "configs" / "amd-master.yaml").read_text()
    assert text.count("kv-offload-backend: { name: hicache }") == \
        old.count("kv-offload-backend: { name: hicache }") + 2
    assert "size-gb-per-rank" not in text and "sglang-34560" not in text
    launcher = (repo / "benchmarks/single_node/agentic/qwen3.5_fp4_mi355x_sglang_mtp.sh"
                ).read_text()
    assert "require_agentic_kv_offload_backend hicache" in launcher
    assert "PATCH = 'sglang-34560'" in launcher
    jobs = [j for j in select_jobs(Selection(
        config_files=(repo / "configs" / "amd-master.yaml",), config_keys=(MI355X_KEY,)))
        if j.row.get("kv-offloading") == "dram"]
    assert len(jobs) == 16
    runners = load_runners(RUNNERS)
    for job in jobs:
        plan = plan_job(job, runners, sizing="launcher")
        assert plan.accepted, plan.errors
        args = plan.engine_args
        assert plan.page_size_tokens == 64
        assert args[args.index("--hicache-size") + 1] == "180"
        assert [args[args.index(f) + 1] for f in ("--hicache-write-policy",
                                                  "--hicache-io-backend",
                                                  "--hicache-mem-layout")] == \
            ["write_through_selective", "kernel", "page_first"]
        assert "patches" not in job.row
    entry = parse_changelog((repo / "perf-changelog.yaml").read_bytes()).entries[-1]
    assert any("sglang-34560" in line for line in entry.description)


def test_twin_hicache_settings_are_what_the_keys_launcher_runs():
    """The HiCache page, write policy, io backend and layout a twin is planned with (plan/
    data/settings.yaml) are, on every recorded HiCache row of the launcher oracle, the ones
    the key's launcher passed (tests/engines/data/launcher_oracle/)."""
    from fixtures.inferencex import RUNNERS
    from fixtures.launcher_oracle import load_recordings, row_id

    from kvbench.matrix import Job
    from kvbench.plan import plan_job
    from kvbench.recipe import load_runners

    runners = load_runners(RUNNERS)
    flags = ("--page-size", "--hicache-write-policy", "--hicache-io-backend",
             "--hicache-mem-layout")
    checked, wrong = 0, []
    for rec in load_recordings():
        row = rec["row"]
        if not rec["launcher"] or (row.get("kv-offload-backend") or {}).get("name") != "hicache":
            continue
        engine = next(c["argv"] for c in rec["calls"] if c["kind"] == "server"
                      and "sglang.launch_server" in " ".join(c["argv"]))
        plan = plan_job(Job(rec["config-key"], row, "agentic-coding"), runners)
        for flag in flags:
            if flag not in engine:
                continue
            want = engine[engine.index(flag) + 1]
            got = (str(plan.page_size_tokens) if flag == "--page-size"
                   else plan.engine_args[plan.engine_args.index(flag) + 1])
            checked += 1
            if got != want:
                wrong.append(f"{rec['config-key']} {row_id(row)} {flag}: launcher {want}, "
                             f"twin {got}")
    assert checked >= 4 * 60
    assert not wrong, "\n".join(wrong)
