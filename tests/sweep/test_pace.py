"""The quickstart's time scale: what the client sustains, within the sweep's time budget
(issue 27 item 10)."""

from __future__ import annotations

import pytest

from kvbench.sweep.pace import MIN_TIME_SCALE, Pace, choose, pressure, save, saved


def _probe(lag_ms, late_ms, cpu, *, replay_s=1.0, job_s=2.0, requests=24) -> dict:
    return {"client": {"loop_lag_ms_p99": lag_ms, "send_lateness_ms_p99": late_ms,
                       "cpu_cores": cpu}, "replay_s": replay_s, "job_s": job_s,
            "requests": requests, "conc": 8}


def test_pressure_is_the_worst_figure_over_its_limit():
    assert pressure(_probe(2.0, 5.0, 0.45)["client"]) == pytest.approx(0.5)
    assert pressure(_probe(20.0, 1.0, 0.1)["client"]) == pytest.approx(2.0)
    assert pressure(_probe(None, None, None)["client"]) == 0.0


def test_a_client_that_keeps_up_keeps_the_default_scale():
    pace = choose(_probe(3.0, 4.0, 0.2), probe_scale=50, jobs=18, requests_per_job=85,
                  budget_s=1e6)
    assert pace.time_scale == 50
    assert pace.line().startswith("time scale 50x: the client sustains it: loop lag p99 3.0 ms")


def test_a_client_behind_gets_a_slower_clock_in_proportion():
    # lag at twice its limit: pressure 2.0 -> 50 * 0.5 / 2 = 12.5x, down to a step of 5
    pace = choose(_probe(20.0, 4.0, 0.2), probe_scale=50, jobs=18, requests_per_job=85,
                  budget_s=1e6)
    assert pace.time_scale == 10
    assert "fell behind at 50x" in pace.reason and "loop lag p99 20.0 ms" in pace.reason
    mild = choose(_probe(7.0, 4.0, 0.2), probe_scale=50, jobs=18, requests_per_job=85,
                  budget_s=1e6)
    assert mild.time_scale == 35  # 50 * 0.5 / 0.7 = 35.7
    hopeless = choose(_probe(500.0, 4.0, 0.2), probe_scale=50, jobs=18,
                      requests_per_job=85, budget_s=1e6)
    assert hopeless.time_scale == MIN_TIME_SCALE


def test_the_time_budget_bounds_how_slow_the_clock_may_go():
    # per job: 1 s fixed, replay 85 requests at 1/24 s each at 50x = 3.54 s; 18 jobs in 60 s
    # leave 60/18 - 1 = 2.33 s per replay -> at least 50 * 3.54 / 2.33 = 76 -> capped at 50
    tight = choose(_probe(20.0, 4.0, 0.2), probe_scale=50, jobs=18, requests_per_job=85,
                   budget_s=60)
    assert tight.time_scale == 50
    assert "need at least 50x: runs may be flagged client-saturated" in tight.reason
    # 18 x (1 s + 3.54 s x 50 / 10) = 337 s
    assert "(--time-scale 10 would take about 337 s)" in tight.reason
    # 180 s: 9 s per replay -> at least 19.7x -> 20x, above the client's 10x
    roomy = choose(_probe(20.0, 4.0, 0.2), probe_scale=50, jobs=18, requests_per_job=85,
                   budget_s=180)
    assert roomy.time_scale == 20
    assert "the client would need 10x" in roomy.reason


def test_the_choice_is_kept_for_a_resumed_quickstart(tmp_path):
    assert saved(tmp_path) is None
    pace = Pace(35.0, "the client fell behind", _probe(7.0, 4.0, 0.2))
    save(tmp_path, pace)
    assert saved(tmp_path) == pace
    (tmp_path / ".kvbench" / "pace.json").write_text("{not json")
    assert saved(tmp_path) is None  # unreadable: probed again


def test_the_sweeps_replays_in_units_of_the_probes_set_the_budget():
    """With the sweep's replays forecast in the engine's clock (sweep/forecast.py) the budget
    counts what each job takes, not every job as heavy as the probe: 50 probe replays of 1 s
    at 50x in 60 - 18 x 1 s = 42 s need 50 x 50 / 42 = 59.5 -> 50 (the cap); 25 of them
    need 29.8 -> 30x, where 85-request jobs counted as heavy as the probe's 24 needed 50x."""
    heavy = choose(_probe(20.0, 4.0, 0.2), probe_scale=50, jobs=18, requests_per_job=85,
                   budget_s=60, replay_units=50)
    assert heavy.time_scale == 50
    light = choose(_probe(20.0, 4.0, 0.2), probe_scale=50, jobs=18, requests_per_job=85,
                   budget_s=60, replay_units=25)
    assert light.time_scale == 30
    # 18 x 1 s + 25 x 1 s x 50 / 10 = 143 s
    assert "(--time-scale 10 would take about 143 s)" in light.reason
