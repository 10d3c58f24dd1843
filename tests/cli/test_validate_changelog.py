"""`kvbench validate configs/*.yaml` on an InferenceX checkout: the perf changelog beside the
master configs is named as what it is and skipped, not reported as a broken master config."""

from __future__ import annotations

from kvbench.cli import main


def test_validate_skips_the_perf_changelog(shared_data, capsys):
    files = sorted(str(p) for p in (shared_data / "inferencex").glob("*.yaml"))
    assert any(f.endswith("perf-changelog.yaml") for f in files)
    main(["validate", *files])
    out = capsys.readouterr().out
    assert "perf-changelog.yaml (a perf changelog, not a config: kvbench changelog check" in out
    assert "nvidia-master.yaml (master config)" in out and "config keys valid" in out
