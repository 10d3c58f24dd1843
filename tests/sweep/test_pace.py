"""The quickstart's pace (sweep/pace.py): on the virtual clock no pace can ask the client for
more than it sustains, so what the machine decides is how many repeats fit the minute after
the first pass: three, or fewer, never below two, said in one line (issue 39)."""

from __future__ import annotations

from kvbench.sweep.pace import MIN_REPEATS, Pace, choose, save, saved


def test_a_machine_that_keeps_the_minute_runs_every_repeat():
    pace = choose(pass_s=12.0, elapsed_s=13.0, wanted=3, budget_s=60, jobs=6)
    assert pace.repeats == 3
    assert pace.line() == ("pace: 3 repeats per point: the first pass (6 jobs) took 12 s; "
                           "3 passes end in about 37 s")


def test_a_slower_machine_runs_fewer_repeats_and_says_so():
    # 60 - 23 = 37 s left hold one more pass of 22 s, not two: 2 passes
    pace = choose(pass_s=22.0, elapsed_s=23.0, wanted=3, budget_s=60, jobs=6)
    assert pace.repeats == 2
    assert "this machine is slower than the quickstart's 60 s need" in pace.reason
    assert "3 would end at about 67 s; running 2 (deltas from n=2) instead" in pace.reason


def test_a_machine_too_slow_for_two_still_runs_the_two_a_verdict_needs():
    pace = choose(pass_s=40.0, elapsed_s=41.0, wanted=3, budget_s=60, jobs=6)
    assert pace.repeats == MIN_REPEATS == 2
    assert pace.reason == ("this machine is too slow for the quickstart's 60 s: the first "
                           "pass (6 jobs) took 40 s; running the fewest that give a delta its "
                           "interval (2), ending at about 81 s")
    assert choose(pass_s=40.0, elapsed_s=41.0, wanted=1, budget_s=60, jobs=6).repeats == 1


def test_the_choice_is_kept_for_a_resumed_quickstart(tmp_path):
    assert saved(tmp_path) is None
    pace = Pace(2, "this machine is too slow")
    save(tmp_path, pace)
    assert saved(tmp_path) == pace
    # an older kvbench's time-scale choice, or a damaged file: chosen again
    (tmp_path / ".kvbench" / "pace.json").write_text('{"time_scale": 40.0, "reason": "x"}')
    assert saved(tmp_path) is None
    (tmp_path / ".kvbench" / "pace.json").write_text("{not json")
    assert saved(tmp_path) is None
