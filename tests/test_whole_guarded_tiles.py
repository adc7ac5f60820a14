"""A loop kept whole by loop partitioning (the pragma ("partition", False)): one copy of
its tile, each row guarded, right at every run-time extent; and the LLVM backend's
unrolled rows behind such guards, nested so that the first false one leaves the tile."""
import numpy as np
import pytest

import tdsl
from tdsl.codegen import llvm

F = 4


def _rows(whole, rows=F):
    n = tdsl.var("n")
    A = tdsl.placeholder((n, 48), name="A")
    B = tdsl.compute((n, 48), lambda i, j: A[i, j] * 2 + 1, name="B")
    s = tdsl.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=rows)
    jo, ji = s[B].split(B.op.axis[1], factor=16)
    s[B].reorder(io, jo, ii, ji)
    s[B].unroll(ii)
    s[B].vectorize(ji)
    if whole:
        s[B].pragma(io, "partition", False)
    return s, A, B


@pytest.mark.parametrize("whole", [False, True])
def test_rows_guarded_in_one_copy_match_numpy_at_every_extent(whole):
    s, A, B = _rows(whole)
    text = str(tdsl.lower(s, [A, B]))
    # kept whole: one copy of the tile, its rows guarded; else a guard-free main part
    # and a guarded tail, two copies
    assert text.count("for i.outer in range(") == (1 if whole else 2), text
    assert text.count(f"unroll({F})") == 1 and "likely(i.outer * 4 + i.inner < n)" in text, text
    f = tdsl.build(s, [A, B], target="llvm")
    rng = np.random.default_rng(0)
    for m in range(1, 3 * F + 2):
        a = rng.standard_normal((m, 48)).astype("float32")
        b = np.full_like(a, np.nan)
        f(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_unrolled_rows_past_a_runtime_end_nest_their_guards():
    """Each unrolled row's guard `likely(io * 4 + ii < n)` branches, when false, past the
    rows after it: a block per row, each reached only from the row before."""
    s, A, B = _rows(True)
    ir_text, _, _ = llvm.codegen(tdsl.lower(s, [A, B], "rows"))
    assert ir_text.count("prefix.then") >= F and "prefix.end" in ir_text
    # a guard that does not read a run-time size (a static extent's ragged tile) is
    # emitted as before, so static kernels' code is unchanged
    A2 = tdsl.placeholder((10, 48), name="A")
    B2 = tdsl.compute((10, 48), lambda i, j: A2[i, j] * 2 + 1, name="B")
    s2 = tdsl.create_schedule(B2.op)
    io, ii = s2[B2].split(B2.op.axis[0], factor=F)
    s2[B2].unroll(ii)
    static_text, _, _ = llvm.codegen(tdsl.lower(s2, [A2, B2], "rows"))
    assert "prefix" not in static_text
