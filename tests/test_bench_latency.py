"""bench/latency.py: the spread of single calls, and the tail kept apart from the calls in
which the process lost a core."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import latency  # noqa: E402


def test_spread_keeps_apart_the_calls_that_waited_for_a_core():
    calls = [1e-3] * 97 + [1.1e-3, 9e-3, 9e-3]
    waited = [0.0] * 98 + [5e-3, 6e-3]        # the slow calls waited 5-6 ms for a core
    sp = latency.Spread(calls, [2e-3], waited=waited)
    assert sp.p99 > 5e-3                        # the tail as measured
    assert sp.n_kept == 98
    assert sp.p99_kept < 1.2e-3 and sp.p50_kept == pytest.approx(1e-3)


def test_spread_without_schedstat_keeps_every_call():
    sp = latency.Spread([1e-3, 2e-3, 3e-3], [1e-3])
    assert sp.n_kept == 3 and sp.p99_kept == pytest.approx(sp.p99)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux schedstat")
def test_percentiles_reads_run_delay_per_call():
    spreads = latency.percentiles([lambda: sum(range(1000)), lambda: np.ones(100).sum()],
                                  calls=10, run=5, pause_s=0.0)
    for sp in spreads:
        assert len(sp.calls) == len(sp.waited) == 10
        assert (sp.waited >= 0).all() and 0 < sp.n_kept <= 10
