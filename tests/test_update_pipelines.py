"""The image pipelines written with update definitions (tdsl.examples.update_pipelines:
histogram equalization, the IIR blur, the bilateral grid, the max filter), scheduled by
auto_schedule and by hand, against their numpy references; bench/pipelines.py times them
beside Halide."""
import numpy as np
import pytest

import tdsl
from tdsl.examples import update_pipelines as UP


@pytest.mark.parametrize("kind", ["auto", "hand"])
@pytest.mark.parametrize("name", list(UP.PIPELINES))
def test_pipeline_matches_numpy(name, kind):
    make, ref, hand = UP.PIPELINES[name]
    N = 96
    a = np.random.default_rng(1).uniform(0.0, 1.0, (N + UP.HALO[name],) * 2).astype(np.float32)
    inp, out = make(N, N)
    target = tdsl.target.Target("llvm -num-cores=2")
    s = tdsl.auto_schedule(out, target) if kind == "auto" else hand(out, target)
    got = np.zeros((N, N), np.float32)
    tdsl.build(s, [inp, out], target=target)(a, got)
    want = ref(a)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_bilateral_grid_lookup_is_kept_not_inlined():
    """The blurred grid is read at each pixel's intensity bin: auto_schedule computes it
    once instead of inlining the blurs into every lookup."""
    inp, out = UP.bilateral_grid(64, 64)
    s = tdsl.auto_schedule(out, "llvm")
    assert "blury: inline" not in str(s.explain())


def test_bilateral_grid_auto_schedule_follows_the_app():
    """apps/bilateral_grid's schedule, derived: the blurs computed once each (not 125 taps
    of the histogram inlined into the last one), vectorized along the grid's contiguous
    (z, c) cells; the histogram built per row of the first blur, inside its parallel loop;
    the slice's lookups proven inside the grid (no check per lookup, vector gathers)."""
    inp, out = UP.bilateral_grid(64, 64)
    s = tdsl.auto_schedule(out, "llvm")
    text = str(s.explain())
    for name in ("blurz", "blurx"):
        assert f"{name}: stencil: compute_root" in text, text
        assert f"{name}: vectorize: fuse(z, c)" in text, text
    assert "histogram: update: compute_at(blurz, gy)" in text, text
    f = tdsl.build(s, [inp, out], target="llvm")
    assert "__tdsl_oob" not in f.get_source()
    a = np.random.default_rng(2).uniform(0.0, 1.0, (64, 64)).astype(np.float32)
    got = np.zeros((64, 64), np.float32)
    f(a, got)
    np.testing.assert_allclose(got, UP.bilateral_grid_numpy(a), rtol=1e-4, atol=1e-5)
