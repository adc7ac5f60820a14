"""Size ranges a kernel is promised (Schedule.assume_range) reach lowering: the simplifier
and loop partitioning drop what cannot run there; and a size class's condition becomes
its variant's ranges (graph/strategy/class_ranges.py), checked against numpy and
onnxruntime at the class's edges."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph.kernel_cache import clear_kernel_cache
from tdsl.graph.strategy import dispatch
from tdsl.graph.strategy.class_ranges import BIG, condition_ranges, variant_ranges
from tdsl.graph.strategy.cpu import attention as cpu_attention


def _doubled(lo=None, hi=None):
    n = tdsl.size_var("n")
    a = tdsl.placeholder((n,), name="A")
    b = tdsl.compute((n,), lambda i: a[i] * 2.0, name="B")
    s = tdsl.create_schedule(b)
    _, inner = s[b].split(b.op.axis[0], 16)
    s[b].vectorize(inner)
    if lo is not None:
        s.assume_range(n, lo, hi)
    return s, [a, b]


def test_assumed_range_drops_the_main_loop():
    # below one vector block, the split's unguarded main loop never runs: one guarded loop
    free = str(tdsl.lower(*_doubled()))
    short = str(tdsl.lower(*_doubled(0, 15)))
    assert free.count("for i.outer") == 2 and "pragma tail" in free
    assert short.count("for i.outer") == 1 and "pragma tail" not in short
    s, args = _doubled(1, 15)
    f = tdsl.build(s, args, target="llvm")
    for n in (1, 7, 15):
        x = np.arange(n, dtype=np.float32)
        y = np.zeros(n, np.float32)
        f(x, y)
        np.testing.assert_array_equal(y, 2 * x)


def test_assumed_range_from_one_block_keeps_the_main_loop():
    # up to two blocks: a full block may run, so the main part and the tail stay
    assert str(tdsl.lower(*_doubled(0, 40))).count("for i.outer") == 2


@pytest.mark.parametrize("var, lo, hi, what", [
    ("not a var", 0, 3, "expected a tdsl.var"),
    (None, 0.5, 3, "two integers"),
    (None, 5, 3, "no value"),
])
def test_assume_range_rejects_bad_ranges(var, lo, hi, what):
    s, (a, _) = _doubled()
    n = a.shape[0] if var is None else var
    with pytest.raises(tdsl.ScheduleError, match=what):
        s.assume_range(n, lo, hi)


def test_assume_range_narrows_an_earlier_range():
    s, (a, _) = _doubled(0, 100)
    s.assume_range(a.shape[0], 10, 200)
    assert s.size_ranges[a.shape[0]] == (10, 100)
    with pytest.raises(tdsl.ScheduleError, match="no value"):
        s.assume_range(a.shape[0], 101, 300)


def test_condition_ranges():
    n, m = tdsl.size_var("n"), tdsl.size_var("m")
    assert condition_ranges(n < 32) == {"n": (0, 31)}
    assert condition_ranges(n >= 4) == {"n": (4, BIG)}
    assert condition_ranges(tdsl.const(8) > n) == {"n": (0, 7)}
    assert condition_ranges((n < 32) & (m == 1)) == {"n": (0, 31), "m": (1, 1)}
    assert condition_ranges((n < 32) & (n > 40)) is None
    # or: the hull of what both sides bound; a side that bounds nothing bounds nothing
    assert condition_ranges((n < 8) | ((n > 20) & (n < 30))) == {"n": (0, 29)}
    assert condition_ranges((n < 8) | (m < 8)) == {}
    assert condition_ranges(n * m < 8) == {}
    # a variant's ranges lie within the declared bounds
    assert variant_ranges(n < 32, {"n": (2, 512)}) == {"n": (2, 31)}
    assert variant_ranges(n < 32, {"m": (2, 512)}) == {"n": (0, 31)}


def _attention():
    pytest.importorskip("onnxruntime")
    from attention_models import attention_onnx
    return attention_onnx("batch", 2, "sequence", "sequence", 32, 48, scale=32 ** -0.5)


def _short_keys_variant(model):
    exe = G.build(G.optimize(G.from_onnx(model), target="llvm"), target="llvm")
    (v,) = [v for k, _, _ in exe.steps for c, v in (k.variants or [])
            if str(c) == f"sequence < {cpu_attention.SHORT_KEYS}"]
    return exe, v


def test_short_keys_variant_is_lowered_for_its_keys(monkeypatch):
    """The attention's "short_keys" variant runs below SHORT_KEYS keys only: lowered for
    those, its loops over the keys in blocks of a vector keep one guarded copy, not a
    main part of at most one step and a tail; it stays right at the class's edges."""
    import onnxruntime as ort
    model = _attention()
    seen = {}
    build = tdsl.build

    def recording(s, args, target=None, name=None, **kw):
        if name and name.endswith("short_keys"):
            seen.setdefault(name, []).append(str(tdsl.lower(s, args, name, target)).count("for "))
        return build(s, args, target=target, name=name, **kw)
    monkeypatch.setattr(dispatch.tdsl, "build", recording)
    clear_kernel_cache()
    exe, _ = _short_keys_variant(model)
    with monkeypatch.context() as m:
        m.setattr(dispatch, "variant_ranges", lambda cond, bounds: {})
        clear_kernel_cache()
        _short_keys_variant(model)
    clear_kernel_cache()
    ((_, (assumed, unassumed)),) = seen.items()
    assert assumed < unassumed
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for B, S in [(1, 1), (2, 15), (1, 16), (1, 31), (2, 32), (1, 33)]:
        feeds = {"q": rng.standard_normal((B, 2, S, 32)).astype(np.float32),
                 "kt": rng.standard_normal((B, 2, 32, S)).astype(np.float32),
                 "v": rng.standard_normal((B, 2, S, 48)).astype(np.float32)}
        np.testing.assert_allclose(exe.run(**feeds)[0], sess.run(None, feeds)[0], rtol=2e-5, atol=2e-5,
                                   err_msg=f"batch {B}, sequence {S}")
