"""The fuzz suite's CPU cost per test: a pytest plugin that adds each test's CPU seconds
(this process and the children it waited for) and prints them, costliest first. CPU, not
wall time: the machine the suite runs on is shared, and wall time there says how busy it
was. Run from the repository root:

    PYTHONPATH=src:benchmarks python3 -m pytest -q -p no:warnings -p no:cacheprovider \\
        -p fuzz_cpu tests/fuzz/
"""

from __future__ import annotations

import resource

import pytest

CPU_S: dict[str, float] = {}


def _cpu_s() -> float:
    own, children = (resource.getrusage(resource.RUSAGE_SELF),
                     resource.getrusage(resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = _cpu_s()
    yield
    name = item.nodeid.split("::")[-1].split("[")[0]
    CPU_S[name] = CPU_S.get(name, 0.0) + _cpu_s() - start


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"CPU total {sum(CPU_S.values()):.1f} s (tests only)")
    for name, cpu_s in sorted(CPU_S.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"CPU {cpu_s:7.2f} s  {name}")
