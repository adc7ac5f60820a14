"""bench/pool_ab.py: each pool setting runs the network with the first's results, its rows
count the pool's work per call, and the pool's settings are as they were afterwards."""
import os
import sys

import numpy as np
import pytest

from tdsl.runtime import threadpool

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
pytest.importorskip("onnx")
pytestmark = pytest.mark.skipif(not threadpool.load_into_jit(), reason="no worker pool library")


def test_sides_run_the_network_alike_and_restore_the_pool():
    import pool_ab
    import tdsl.graph as G
    from tdsl.graph import models
    exe = G.build(G.optimize(G.from_onnx(models.resnet18(size=32, width=8, num_classes=10))))
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = exe.run(x)[0].copy()
    outs, checked = [], []

    def run():
        outs[:] = exe.run(x)[:1]

    def check():
        np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-5)
        checked.append((threadpool.task_ns(), threadpool.steal_late_only()))
    threadpool.set_steal_late_only(True)
    sides = pool_ab.sides_of(["one", "fine", "fine_any"], task_us=1.0)
    rows = pool_ab.compare(run, sides, calls=4, number=1, repeat=1, check=check)
    assert checked == [(0, True), (1000, True), (1000, False)]
    assert [r[0] for r in rows] == ["one", "fine", "fine_any"]
    for name, block, spread, counts in rows:
        assert block > 0 and spread.p50 > 0 and len(spread.calls) >= 4
        assert len(counts["tasks"]) >= 4 and min(counts["tasks"]) > 0
        assert "taken" in pool_ab.row_text("m", name, block, spread, counts)
    one = dict((r[0], r[3]) for r in rows)
    assert max(one["one"]["taken"]) == 0        # one task per thread: nothing to take
    assert threadpool.task_ns() == 0 and threadpool.steal_late_only()
    with pytest.raises(SystemExit):
        pool_ab.sides_of(["nope"], 50)
