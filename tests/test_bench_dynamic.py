"""bench/dynamic.py: a first call's cost beyond a warm one taken apart into work (CPU
time), page faults and time waiting for a core, so that a sweep row tells tdsl's work at
a new size from the machine's."""
import os
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import dynamic  # noqa: E402
from latency import _threads  # noqa: E402


def _cost(wall, cpu, faults=0, waited=0.0, stolen=0.0):
    return types.SimpleNamespace(wall=wall, cpu=cpu, faults=faults, waited=waited, stolen=stolen)


def test_cost_counts_the_faults_and_cpu_of_fresh_memory():
    n = 32 << 20
    cost = dynamic._Cost(lambda: np.ones(n, np.uint8).sum(), _threads())
    # 32 MiB first touched: at least one fault per 2 MiB huge page, else per 4 KiB page
    assert cost.faults >= n // (2 << 20)
    assert cost.cpu > 0 and cost.wall > 0 and cost.waited >= 0 and cost.stolen >= 0
    again = dynamic._Cost(lambda: None, _threads())
    assert again.faults < cost.faults


def test_first_note_splits_work_from_waiting():
    warm = [_cost(0.060, 0.110, waited=0.001), _cost(0.062, 0.112, waited=0.002), _cost(0.061, 0.111)]
    # 40 ms more wall, 2 ms more CPU, 38 ms more waiting: the machine's, not tdsl's
    note = dynamic._first_note(_cost(0.101, 0.113, faults=7, waited=0.039, stolen=0.02), warm)
    assert "+40.0 ms" in note and "CPU +2.0 ms" in note and "7 page faults" in note
    assert "waited for a core +38.0 ms" in note and "stolen by the host 20 ms" in note


def test_first_note_is_empty_below_the_threshold():
    warm = [_cost(0.060, 0.110)] * 3
    assert dynamic._first_note(_cost(0.060 + dynamic.FIRST_NOTE_MS * 1e-3 / 2, 0.2), warm) == ""


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux /proc/stat")
def test_stolen_seconds_reads_the_steal_column():
    with open("/proc/stat") as f:
        fields = f.readline().split()
    assert fields[0] == "cpu"
    before = dynamic._stolen_seconds()
    assert before == pytest.approx(int(fields[8]) / os.sysconf("SC_CLK_TCK"), abs=1.0)
    assert dynamic._stolen_seconds() >= before


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux schedstat")
def test_cost_reads_waits_of_the_threads_given():
    cost = dynamic._Cost(lambda: sum(range(100000)), _threads())
    assert cost.waited >= 0 and cost.cpu > 0
