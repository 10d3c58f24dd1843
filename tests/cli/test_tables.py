"""Table rows a reader can tell apart: the real catalog's exp-names repeat across config keys
and runners, so `kvbench plan` rows carry a short id, the config key and the hardware."""

from __future__ import annotations

from kvbench.cli import main


def test_plan_rows_are_identified_uniquely(shared_data, capsys):
    main(["plan", "--config-files", str(shared_data / "inferencex" / "nvidia-master.yaml"),
          "--scenario-type", "agentic-coding"])
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()
            if line.startswith("│")]
    jobs = [r for r in rows if r[0]]
    names = {r[2] for r in jobs}
    assert len(jobs) > len(names)  # the problem: exp-names alone repeat
    assert len({r[0] for r in jobs}) == len(jobs)  # the id does not
    assert all(len(r[0]) == 8 and r[1] and r[3] for r in jobs)
    # piped (not a terminal): no name is cut to fit 80 columns
    assert all("…" not in cell for r in jobs for cell in r[:4])
