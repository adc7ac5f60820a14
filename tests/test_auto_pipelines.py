"""auto_schedule on multi-stage image pipelines (the stencil rule, tdsl/autosched/
cpu_stencil.py): results against numpy at sizes that are not multiples of the tile or the
vector, symbolic sizes, and the grouping the explanation reports."""
import numpy as np
import pytest

import tdsl

from tdsl.examples.pipelines import GAUSS5 as G5, HALO, PIPELINES, harris

PIPES = {name: (make, ref, HALO[name]) for name, (make, ref) in PIPELINES.items()}


def run(name, H, W, shape_args=None, seed=0):
    make, ref, halo = PIPES[name]
    inp, out = make(*(shape_args or (H, W)))
    s = tdsl.auto_schedule(out, "llvm")
    f = tdsl.build(s, [inp, out], target="llvm")
    a = np.random.default_rng(seed).uniform(0.5, 1.5, (H + halo, W + halo)).astype(np.float32)
    res = np.zeros((H, W), np.float32)
    f(a, res)
    want = ref(a.astype(np.float64))
    np.testing.assert_allclose(res, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    return s.explain()


@pytest.mark.parametrize("H,W", [(37, 101), (70, 300), (5, 17)])
@pytest.mark.parametrize("name", sorted(PIPES))
def test_pipeline_matches_numpy(name, H, W):
    run(name, H, W)


def test_harris_groups_gradients_at_a_tile():
    ex = run("harris", 150, 530)
    tiled = [d for d in ex.decisions if d.rule == "stencil"]
    assert {d.stage for d in tiled} == {"Ix", "Iy"}, str(ex)
    assert any(d.stage == "Ix" and d.action.startswith("compute_at(harris") for d in tiled)
    assert "stencil tile" in ex.rules("harris")
    # the products and box sums are cheap once the gradients are in memory: inlined
    for st in ("Ixx", "Iyy", "Ixy", "Sxx", "Syy", "Sxy"):
        assert ex.rules(st) == ["inline"], str(ex)
    assert "parallel" in ex.rules("harris")
    assert "fuse siblings" in ex.rules("harris")


def test_harris_gradients_share_one_loop_nest():
    """Ix and Iy, marked to fuse, are computed in one nest over the tile's rows (their
    shared input taps loaded once), with the same numbers as numpy."""
    from tdsl.examples import pipelines as P
    inp, out = P.harris(96, 160)
    s = tdsl.auto_schedule(out, "llvm")
    text = str(tdsl.lower(s, [inp, out]))
    # one nest over the rows (per version of the function): no second loop for Iy's rows
    assert "for y in range" in text and "for y_1 in range" not in text, text
    f = tdsl.build(s, [inp, out], target="llvm")
    a = np.random.default_rng(0).uniform(0.5, 1.5, (100, 164)).astype(np.float32)
    res = np.zeros((96, 160), np.float32)
    f(a, res)
    ref = P.harris_numpy(a.astype(np.float64))
    np.testing.assert_allclose(res, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_siblings_that_depend_on_each_other_stay_apart():
    """The second marked stage reads the first: fusing would read rows not yet written,
    so the pass leaves the two nests one after the other; results match numpy."""
    A = tdsl.placeholder((32, 48), name="A")
    B = tdsl.compute((32, 48), lambda i, j: A[i, j] * 2.0, name="B")
    C = tdsl.compute((32, 48), lambda i, j: B[31 - i, j] + 1.0, name="C")
    D = tdsl.compute((32, 48), lambda i, j: B[i, j] + C[i, j], name="D")
    s = tdsl.create_schedule(D)
    for T in (B, C):
        s[T].pragma(s[T].op.axis[0], "fuse_siblings")
    text = str(tdsl.lower(s, [A, D]))
    assert text.count("for i in range") + text.count("for i_1 in range") >= 2, text
    f = tdsl.build(s, [A, D])
    a = np.random.default_rng(1).standard_normal((32, 48)).astype(np.float32)
    d = np.zeros((32, 48), np.float32)
    f(a, d)
    b = a * 2
    np.testing.assert_allclose(d, b + (b[::-1] + 1), rtol=1e-5, atol=1e-6)


def test_unsharp_computes_blur_x_per_tile_and_inlines_the_rest():
    ex = run("unsharp", 130, 260)
    assert "stencil" in ex.rules("blur_x"), str(ex)
    for st in ("blur_y", "sharpen", "ratio"):
        assert ex.rules(st) == ["inline"], str(ex)
    halo = [d for d in ex.decisions if d.stage == "unsharp" and d.rule == "stencil tile"]
    assert halo and "halo of 4 x 0" in halo[0].why


def test_cheap_taps_stay_inlined():
    """A 3-tap box of 3-tap sums: recomputing costs less than a store and loads."""
    ex = run("blur", 40, 70)
    assert ex.rules("blur_x") == ["inline"], str(ex)
    assert "stencil tile" not in ex.rules("blur_y")


@pytest.mark.parametrize("name", ["harris", "unsharp"])
def test_symbolic_sizes(name):
    h, w = tdsl.size_var("h"), tdsl.size_var("w")
    make, ref, halo = PIPES[name]
    inp, out = make(h, w)
    s = tdsl.auto_schedule(out, "llvm")
    assert "stencil tile" in s.explain().rules(name)
    f = tdsl.build(s, [inp, out], target="llvm")
    for H, W in [(33, 77), (64, 128)]:
        a = np.random.default_rng(H).uniform(0.5, 1.5, (H + halo, W + halo)).astype(np.float32)
        res = np.zeros((H, W), np.float32)
        f(a, res)
        want = ref(a.astype(np.float64))
        np.testing.assert_allclose(res, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_batched_stencil_parallel_over_outer_axis():
    """A 5-tap blur per channel: the channel axis stays outside the tile loops."""
    C, H, W = 3, 21, 45
    inp = tdsl.placeholder((C, H + 4, W), name="inp")
    bx = tdsl.compute((C, H + 4, W), lambda c, y, x: tdsl.exp(inp[c, y, x]) * 0.5, name="e")
    out = tdsl.compute((C, H, W), lambda c, y, x: sum(G5[k] * bx[c, y + k, x] for k in range(5)),
                       name="out")
    s = tdsl.auto_schedule(out, "llvm")
    ex = s.explain()
    assert "stencil" in ex.rules("e"), str(ex)
    f = tdsl.build(s, [inp, out], target="llvm")
    a = np.random.default_rng(1).standard_normal((C, H + 4, W)).astype(np.float32)
    res = np.zeros((C, H, W), np.float32)
    f(a, res)
    e = np.exp(a.astype(np.float64)) * 0.5
    want = sum(G5[k] * e[:, k:k + H] for k in range(5))
    np.testing.assert_allclose(res, want, rtol=1e-5, atol=1e-5)


def test_sizes_follow_the_target():
    """An AVX2 target with a smaller L2 gets 8-lane columns and fewer rows per tile."""
    inp, out = harris(256, 512)
    big = tdsl.auto_schedule(out, "llvm -mcpu=znver4").explain()
    small = tdsl.auto_schedule(out, "llvm -mcpu=haswell").explain()

    def tile(ex):
        (d,) = [d for d in ex.decisions if d.rule == "stencil tile"]
        return d.action
    assert tile(big) != tile(small)
    assert "8 x float32" in str(small) and "16 x float32" in str(big)
