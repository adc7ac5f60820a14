"""Stage.prefetch(tensor, axis, offset): at each iteration of `axis`, the part of `tensor`
that iteration `axis + offset` reads and the one before did not is fetched into the cache.
The values never change; the fetches stay inside the tensor."""
import re

import numpy as np
import pytest

import tdsl
from tdsl.examples import pipelines as P

H, W = 40, 100


def column_sum(rows=3):
    """B[y, x] = A[y, x] + ... + A[y + rows - 1, x]: a row loop whose window slides."""
    A = tdsl.placeholder((H + rows - 1, W), name="A")
    B = tdsl.compute((H, W), lambda y, x: sum(A[y + k, x] for k in range(rows)), name="B")
    return A, B


def prefetch_lines(text):
    return [ln.strip() for ln in text.splitlines() if "prefetch(" in ln]


def check(mod, rows=3):
    a = np.random.default_rng(0).standard_normal((H + rows - 1, W)).astype(np.float32)
    b = np.zeros((H, W), np.float32)
    mod(a, b)
    want = sum(a[k:k + H] for k in range(rows))
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_a_sliding_window_fetches_only_the_row_coming_in(target):
    A, B = column_sum()
    s = tdsl.create_schedule(B)
    y, x = s[B].op.axis
    s[B].vectorize(s[B].split(x, 4)[1])
    s[B].prefetch(A, y, 4)
    text = str(tdsl.lower(s, [A, B]))
    # iteration y + 4 reads rows y+4..y+6, of which y+4 and y+5 came with earlier ones
    lines = prefetch_lines(text)
    assert len(lines) == 1, text
    loop = re.search(r"for (y\.pf0) in range\(y \+ 6, y \+ 6 \+ min\((.*)\)\):", text)
    assert loop, text
    assert "prefetch(A[y.pf0 * 100], 100)" in text, text
    mod = tdsl.build(s, [A, B], target=target)
    check(mod)
    if target == "llvm":
        assert "prefetcht0" in mod.get_source("asm")
    else:
        assert "__builtin_prefetch" in mod.get_source()


def column_tiles(*order):
    """(A, B, schedule, axes): the column sum with x split into tiles of 25, loops in
    `order` (names among "y", "xo", "xi")."""
    A, B = column_sum()
    s = tdsl.create_schedule(B)
    y, x = s[B].op.axis
    xo, xi = s[B].split(x, 25)
    axes = {"y": y, "xo": xo, "xi": xi}
    s[B].reorder(*(axes[n] for n in order))
    return A, B, s, axes


def test_a_tile_loop_fetches_the_whole_next_tile():
    """Tiles do not overlap: iteration x.outer + 1 reads columns the current one did not."""
    A, B, s, ax = column_tiles("xo", "y", "xi")
    s[B].prefetch(A, ax["xo"], 1)
    text = str(tdsl.lower(s, [A, B]))
    assert len(prefetch_lines(text)) == 1, text
    # every row of the tile (42), 25 columns from the next tile's start, clipped to A
    assert "for x.outer.pf0 in range(42):" in text, text
    assert "prefetch(A[x.outer.pf0 * 100 + x.outer * 25 + 25], min(75 - x.outer * 25, 25))" \
        in text, text
    check(tdsl.build(s, [A, B]))


def test_a_region_that_does_not_move_fetches_nothing():
    A = tdsl.placeholder((W,), name="A")
    B = tdsl.compute((H, W), lambda y, x: A[x] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    s[B].prefetch(A, s[B].op.axis[0], 2)
    assert not prefetch_lines(str(tdsl.lower(s, [A, B])))


def test_the_fetches_stay_inside_the_tensor():
    """Near the last rows, iteration y + offset is past the end: the bounds-checked build
    (which checks the first and last element of every prefetch) reports nothing."""
    A, B = column_sum()
    s = tdsl.create_schedule(B)
    yo, yi = s[B].split(s[B].op.axis[0], 8)
    s[B].parallel(yo)
    s[B].prefetch(A, yi, 7)
    check(tdsl.build(s, [A, B], bounds_check=True))
    text = str(tdsl.lower(s, [A, B]))
    assert "min(" in text      # the rows are clipped to A's 42


def test_reads_through_an_inlined_stage_are_fetched():
    A, _ = column_sum()
    S = tdsl.compute(A.shape, lambda y, x: A[y, x] * A[y, x], name="S")
    B = tdsl.compute((H, W), lambda y, x: S[y, x] + S[y + 2, x], name="B")
    s = tdsl.create_schedule(B)
    s[S].compute_inline()
    s[B].prefetch(A, s[B].op.axis[0], 1)
    text = str(tdsl.lower(s, [A, B]))
    assert len(prefetch_lines(text)) == 1, text
    a = np.random.default_rng(1).standard_normal(A.shape).astype(np.float32)
    b = np.zeros((H, W), np.float32)
    tdsl.build(s, [A, B])(a, b)
    np.testing.assert_allclose(b, a[:H] ** 2 + a[2:H + 2] ** 2, rtol=1e-5)


def test_auto_schedule_prefetches_the_rows_a_stencil_tile_reads():
    inp, out = P.harris(130, 260)
    s = tdsl.auto_schedule(out, "llvm")
    assert "prefetch" in s.explain().rules("Ix")
    text = str(tdsl.lower(s, [inp, out]))
    # Ix and Iy read the same input rows: fetched once in each copy of the one loop nest
    # they share (ragged tiles are peeled into copies; a last tile with no rows ahead of
    # it in the image has none)
    nests = text.split("pragma fuse_siblings")[1:]
    assert nests and all(len(prefetch_lines(n)) <= 1 for n in nests), text
    assert prefetch_lines(nests[0]), text
    a = np.random.default_rng(2).uniform(0.5, 1.5, (134, 264)).astype(np.float32)
    res = np.zeros((130, 260), np.float32)
    tdsl.build(s, [inp, out], target="llvm", bounds_check=True)(a, res)
    want = P.harris_numpy(a.astype(np.float64))
    np.testing.assert_allclose(res, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_wrong_uses_name_what_is_wrong():
    A, B = column_sum()
    C = tdsl.placeholder((H, W), name="C")
    s = tdsl.create_schedule(B)
    y, x = s[B].op.axis
    with pytest.raises(tdsl.ScheduleError, match="offset must be"):
        s[B].prefetch(A, y, 0)
    with pytest.raises(tdsl.ScheduleError, match="expected a tensor"):
        s[B].prefetch("A", y, 1)
    xo, xi = s[B].split(x, 4)
    s[B].vectorize(xi)
    with pytest.raises(tdsl.ScheduleError, match="vectorized"):
        s[B].prefetch(A, xi, 1)
    with pytest.raises(tdsl.ScheduleError, match="'C' is not part of this schedule"):
        s[B].prefetch(C, y, 1)
    s[B].prefetch(B, y, 1)
    with pytest.raises(tdsl.ScheduleError, match="does not read 'B'"):
        tdsl.lower(s, [A, B])

    s = tdsl.create_schedule(B)
    y, x = s[B].op.axis
    s[B].prefetch(A, y, 1)
    s[B].split(y, 4)
    with pytest.raises(tdsl.ScheduleError, match="was split or fused after"):
        tdsl.lower(s, [A, B])

    A, _ = column_sum()
    T = tdsl.compute(A.shape, lambda y, x: A[y, x] + 1.0, name="T")
    B = tdsl.compute((H, W), lambda y, x: T[y, x] + T[y + 2, x], name="B")
    s = tdsl.create_schedule(B)
    s[T].compute_at(s[B], s[B].op.axis[0])
    s[B].prefetch(T, s[B].op.axis[0], 1)
    with pytest.raises(tdsl.ScheduleError, match="computed at a loop of 'B'"):
        tdsl.lower(s, [A, B])


def gray_box(transposed, H2=64, W2=96):
    """A 3x3 box sum of exp(2 inp), the input read through an inlined stage, transposed or
    in order."""
    inp = tdsl.placeholder((W2 + 2, H2 + 2) if transposed else (H2 + 2, W2 + 2), name="inp")
    g = tdsl.compute((H2 + 2, W2 + 2), lambda y, x: (inp[x, y] if transposed else inp[y, x])
                     * 2.0, name="g")
    e = tdsl.compute((H2 + 2, W2 + 2), lambda y, x: tdsl.exp(g[y, x]), name="e")
    out = tdsl.compute((H2, W2), lambda y, x: sum(e[y + i, x + j] for i in range(3)
                                                  for j in range(3)), name="out")
    return inp, out, tdsl.auto_schedule(out, "llvm")


def test_auto_schedule_prefetches_only_rows_read_in_order():
    """A stencil member reading its input transposed would fetch one line per point: no
    prefetch there; reads through an inlined stage (a gray conversion) keep theirs."""
    _, _, s = gray_box(transposed=True)
    assert "stencil" in s.explain().rules("e")
    assert "prefetch" not in s.explain().rules("e")

    inp, out, s = gray_box(transposed=False)
    assert "prefetch" in s.explain().rules("e"), str(s.explain())
    a = np.random.default_rng(3).standard_normal((66, 98)).astype(np.float32)
    r = np.zeros((64, 96), np.float32)
    tdsl.build(s, [inp, out])(a, r)
    ex = np.exp(a * 2.0)
    want = sum(ex[i:i + 64, j:j + 96] for i in range(3) for j in range(3))
    np.testing.assert_allclose(r, want, rtol=1e-5)


def test_a_reduction_loop_fetches_ahead_along_its_row():
    """At the reduction's outer loop of a row sum: the next chunks of the row come in, the
    sums unchanged."""
    from tdsl.examples import kernels
    X, R = kernels.row_sum(16, 1000)
    s = tdsl.create_schedule(R)
    ko, ki = s[R].split(s[R].op.reduce_axis[0], 64)
    s[R].prefetch(X, ko, 4)
    text = str(tdsl.lower(s, [X, R]))
    assert len(prefetch_lines(text)) == 1, text
    x = np.random.default_rng(4).standard_normal((16, 1000)).astype(np.float32)
    r = np.zeros(16, np.float32)
    tdsl.build(s, [X, R], bounds_check=True)(x, r)
    np.testing.assert_allclose(r, x.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_gpu_kernels_keep_their_values_and_print_no_fetch():
    """A hint for CPU caches: inside a GPU kernel it changes nothing and prints nothing."""
    A, B, s, ax = column_tiles("xo", "xi", "y")
    s[B].bind(ax["xo"], tdsl.thread_axis("blockIdx.x"))
    s[B].bind(ax["xi"], tdsl.thread_axis("threadIdx.x"))
    s[B].prefetch(A, ax["y"], 2)
    assert prefetch_lines(str(tdsl.lower(s, [A, B])))
    check(tdsl.build(s, [A, B], target="c"))
    assert "prefetch" not in tdsl.build(s, [A, B], target="cuda").get_source()
