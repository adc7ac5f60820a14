"""float32 erf over a dense sweep of inputs against the exact (float64 math.erf) value:
the AVX-512 form of 16 lanes and of 64 split into 16s (interval tables,
codegen/llvm/erf_table.py), the blended two-polynomial form narrower vectors use, and the
scalar form."""
import math

import numpy as np
import pytest

import tdsl
from tdsl.target import Target


def _sweep():
    """Every 1801st positive float32 from the smallest denormal to 5 (~600k values), each
    interval boundary of the tables and the clamp with its 64 neighbours either side,
    large, tiny and special values; then all of them negated too."""
    bits = np.arange(1, np.float32(5).view(np.int32), 1801, dtype=np.int32)
    edges = np.float32([k / 4 for k in range(1, 17)] + [3.99]).view(np.int32)
    near = (edges[:, None] + np.arange(-64, 65, dtype=np.int32)).ravel()
    x = np.concatenate([bits, near]).view(np.float32)
    x = np.concatenate([x, np.float32([0, 1e-45, 1e-38, 1.17549435e-38, 9, 1e10, 3.4e38,
                                       np.inf, np.nan])])
    x = np.concatenate([x, np.zeros((-x.size) % 8, np.float32)])
    return np.concatenate([x, -x])


def _build(n, lanes):
    x = tdsl.placeholder((n,), name="x")
    y = tdsl.compute((n,), lambda i: tdsl.erf(x[i]), name="y")
    s = tdsl.create_schedule(y)
    if lanes > 1:
        _, inner = s[y].split(y.op.axis[0], factor=lanes)
        s[y].vectorize(inner)
    return tdsl.build(s, [x, y])


def _ulps_from_exact(got, x):
    """|got - erf(x)| in units of the float32 spacing at erf(x) (below 1: 2^-24), exact
    erf in float64; 0 where both are NaN."""
    want = np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    spacing = np.where(np.abs(want.astype(np.float32)) == 1, 2.0 ** -24, spacing)
    spacing = np.maximum(spacing, 2.0 ** -149)
    same = (np.isnan(got) & np.isnan(want)) | (got == want)
    return np.where(same, 0.0, np.abs(got.astype(np.float64) - want) / spacing)


# the table form measured under 0.98 ulp from the exact erf, the blended form at most 2
@pytest.mark.parametrize("lanes,bound", [(16, 1.0), (64, 1.0), (8, 2.0), (1, 2.0)])
def test_erf_float32_dense_sweep(lanes, bound):
    x = _sweep()
    f = _build(x.size, lanes)
    if lanes >= 16 and Target.host().vector_bits >= 512:
        assert "vpermps" in f.get_source("asm")       # the table form is the one measured
    else:
        bound = 2.0         # without AVX-512 every width takes the blended form
    got = np.empty_like(x)
    f(x, got)
    err = _ulps_from_exact(got, x)
    worst = int(np.argmax(err))
    assert err.max() <= bound, (lanes, float(err.max()), float(x[worst]), float(got[worst]))
    # erf is odd, exactly; saturates to +-1 and keeps NaN
    half = x.size // 2
    np.testing.assert_array_equal(got[half:], -got[:half])
    assert np.isnan(got[np.isnan(x)]).all()
    assert (got[np.isinf(x)] == np.sign(x[np.isinf(x)])).all()
    tiny = (x != 0) & (np.abs(x) < 1e-30)
    assert (np.sign(got[tiny]) == np.sign(x[tiny])).all()
