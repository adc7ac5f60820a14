"""Stage.store_with: an intermediate stored in an output's buffer at the output's indices
(softmax's exponentials in the output, then divided in place), checked against numpy, and
every schedule that could read an overwritten value refused with an error naming it; in
random legal placements of a softmax's stages, a store_with is either refused or right
with every access bounds-checked (removing either half of the checks fails them)."""
import numpy as np
import pytest

import tdsl
from tdsl.examples import kernels


def _x(M, N, seed=0):
    return np.random.default_rng(seed).standard_normal((M, N), dtype=np.float32)


def _softmax_at_rows(M, N, split=None):
    """softmax with the max, the exponentials and the sum computed per row of Y; `split`
    vectorizes Y's row in pieces of that width."""
    X, mx, ex, sm, Y = kernels.softmax(M, N)
    s = tdsl.create_schedule(Y)
    i, j = Y.op.axis
    if split:
        _, ji = s[Y].split(j, factor=split)
        s[Y].vectorize(ji)
    for t in (mx, ex, sm):
        s[t].compute_at(s[Y], i)
    return s, X, mx, ex, sm, Y


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_softmax_with_exponentials_in_the_output_matches_numpy(target):
    M, N = 13, 96
    s, X, mx, ex, sm, Y = _softmax_at_rows(M, N, split=16)
    s[ex].store_with(Y)
    text = str(tdsl.lower(s, [X, Y]))
    # no buffer of its own: the exponentials are written to Y and divided there
    assert "exp = allocate" not in text and "Y[i * 96 + " in text, text
    x = _x(M, N)
    out = np.empty_like(x)
    tdsl.build(s, [X, Y], target=target)(x, out)
    np.testing.assert_allclose(out, kernels.softmax_reference(x), rtol=1e-5, atol=1e-7)


def test_auto_schedule_stores_the_exponentials_in_the_output_where_rows_are_exact():
    for (M, N), expect in (((32, 1024), True), ((9, 7), True), ((37, 1000), False)):
        X, mx, ex, sm, Y = kernels.softmax(M, N)
        s = tdsl.auto_schedule(Y)
        assert (s[ex].stored_with is s[Y]) == expect, (M, N, s.explain())
        # a store_with tried and not kept leaves no trace in the printed schedule
        assert any("store_with" in t for t in s.trace) == expect, s.trace
        x = _x(M, N, 1)
        out = np.empty_like(x)
        tdsl.build(s, [X, Y])(x, out)
        np.testing.assert_allclose(out, kernels.softmax_reference(x), rtol=1e-5, atol=1e-7)


def _lower_error(s, args, *words):
    with pytest.raises(tdsl.TdslError) as e:
        tdsl.lower(s, args)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_a_stage_not_computed_at_the_output_is_refused():
    X, mx, ex, sm, Y = kernels.softmax(8, 32)
    s = tdsl.create_schedule(Y)
    s[ex].store_with(Y)
    _lower_error(s, [X, Y], "store_with", "'exp'", "compute_at")


def test_a_reader_at_an_inner_loop_of_the_output_is_refused():
    # the row sum recomputed per piece of the row would read exponentials that Y's earlier
    # pieces have already overwritten
    X, mx, ex, sm, Y = kernels.softmax(8, 32)
    s = tdsl.create_schedule(Y)
    i, j = Y.op.axis
    jo, _ = s[Y].split(j, factor=8)
    s[mx].compute_at(s[Y], i)
    s[ex].compute_at(s[Y], i)
    s[sm].compute_at(s[Y], jo)
    s[ex].store_with(Y)
    _lower_error(s, [X, Y], "store_with", "'rowsum' reads it", "same loop")


def _exp_stored_in(fy, after=None, M=8, N=32):
    """E = exp(X) computed per row of Y = fy(E, N) and stored with Y; `after(Y)` adds a
    stage after Y. Returns the schedule, X and the last stage."""
    X = tdsl.placeholder((M, N), name="X")
    E = tdsl.compute((M, N), lambda i, j: tdsl.exp(X[i, j]), name="E")
    Y = fy(E, N)
    last = after(Y) if after else Y
    s = tdsl.create_schedule(last)
    s[E].compute_at(s[Y], Y.op.axis[0])
    s[E].store_with(Y)
    return s, X, last


def test_a_shifted_read_by_the_output_is_refused():
    s, X, Y = _exp_stored_in(lambda E, N: tdsl.compute(
        E.shape, lambda i, j: E[i, (j + 1) % N] + E[i, j], name="Y"))
    _lower_error(s, [X, Y], "store_with", "'E'", "not at its own indices")


def test_a_region_larger_than_the_output_row_is_refused():
    # a split of Y that does not divide its row: E would be computed past the row's end,
    # over the next row's values
    s, X, mx, ex, sm, Y = _softmax_at_rows(8, 30, split=16)
    s[ex].store_with(Y)
    _lower_error(s, [X, Y], "store_with", "'exp'")


def test_an_output_that_is_not_an_argument_is_refused():
    s, X, Z = _exp_stored_in(lambda E, N: tdsl.compute(E.shape, lambda i, j: E[i, j] * 2.0, name="Y"),
                             after=lambda Y: tdsl.compute(Y.shape, lambda i, j: Y[i, j] + 1.0, name="Z"))
    _lower_error(s, [X, Z], "store_with", "'Y' is not an argument")


def test_a_reduction_output_is_refused():
    k = tdsl.reduce_axis((0, 4), name="k")
    s, X, Y = _exp_stored_in(lambda E, N: tdsl.compute(
        E.shape, lambda i, j: tdsl.sum(E[i, j] * k, axis=k), name="Y"))
    _lower_error(s, [X, Y], "store_with", "reduction")


def test_shape_dtype_and_tensor_mismatches_are_refused_at_the_call():
    X, mx, ex, sm, Y = kernels.softmax(8, 32)
    s = tdsl.create_schedule(Y)
    with pytest.raises(tdsl.TdslError, match="shape"):
        s[ex].store_with(mx)
    with pytest.raises(tdsl.TdslError, match="itself"):
        s[ex].store_with(ex)
    other = tdsl.placeholder((8, 32), name="other")
    with pytest.raises(tdsl.TdslError, match="not part of this schedule"):
        s[ex].store_with(other)
    X2 = tdsl.placeholder((8, 32), name="X2", dtype="float64")
    D = tdsl.compute((8, 32), lambda i, j: X2[i, j] * 2.0, name="D")
    with pytest.raises(tdsl.TdslError, match="dtype"):
        tdsl.create_schedule([Y, D])[ex].store_with(D)


def _random_softmax(rnd):
    """A softmax with random splits of Y, its stages at random loops of Y (or at root; any
    legal placement), and store_with drawn half the time."""
    M, N = rnd.choice([(6, 32), (5, 30), (4, 48), (3, 7)])
    X, mx, ex, sm, Y = kernels.softmax(M, N)
    s = tdsl.create_schedule(Y)
    i, j = Y.op.axis
    if rnd.random() < 0.7:
        _, ji = s[Y].split(j, factor=rnd.choice([2, 4, 8, 16]))
        if rnd.random() < 0.5:
            s[Y].vectorize(ji)
    if rnd.random() < 0.5:
        s[Y].parallel(i)
    loops = s[Y].leaf_iter_vars[:-1] or [i]
    if rnd.random() < 0.8:      # else all at root
        at = rnd.randrange(len(loops))
        s[mx].compute_at(s[Y], loops[at])
        s[ex].compute_at(s[Y], loops[at])
        # the row sum at the same loop or a deeper one (legal; for store_with, not)
        s[sm].compute_at(s[Y], loops[rnd.randrange(at, len(loops))])
    if rnd.random() < 0.4:
        (k,) = s[sm].op.reduce_axis
        s[sm].split(k, factor=rnd.choice([4, 5, 16]))
    asked = rnd.random() < 0.5
    if asked:
        s[ex].store_with(Y)
    return s, X, Y, asked, (M, N)


@pytest.mark.parametrize("seed", range(40))
def test_random_schedules_with_store_with_are_refused_or_right(seed):
    """Whatever store_with is asked in a random schedule, lowering either refuses it with
    an error naming it or the kernel, every access bounds-checked, matches numpy."""
    import random
    rnd = random.Random(seed)
    s, X, Y, asked, shape = _random_softmax(rnd)
    try:
        f = tdsl.build(s, [X, Y], bounds_check=True)
    except tdsl.TdslError as e:
        assert asked and "store_with" in str(e), str(e)
        return
    x = _x(*shape, seed)
    out = np.full(shape, np.nan, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, kernels.softmax_reference(x), rtol=1e-5, atol=1e-7,
                               err_msg=str(s))
