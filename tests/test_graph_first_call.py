"""The first call at sizes a network built once has never run (issue 41: at most 20 ms
beyond a warm call, no compile on the request path): it plans memory, picks each kernel's
size class and makes a run state with plain integer arithmetic, and runs the kernels
built at build time. Nothing of the compiler runs (TE, lowering, schedules, TIR passes,
code generation, LLVM, the strategies that build kernels, the ONNX reader), and sympy
builds no expression: size expressions were turned into Python functions at build time
(graph/ir/dims.py), so the only sympy calls left are hashing and comparing expressions
that exist already. Each call's results are compared with onnxruntime."""
import sys

import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import kernel_cache, models
from test_graph_dynamic import causal_mask_model

pytest.importorskip("onnxruntime")

# what compiles: any function of these modules running in a call is compile work
COMPILER = ("llvmlite", "tdsl.te", "tdsl.lower", "tdsl.schedule", "tdsl.passes.", "tdsl.tir",
            "tdsl.arith", "tdsl.codegen", "tdsl.autosched", "tdsl.autotune", "tdsl.build",
            "tdsl.graph.kernel_cache", "tdsl.graph.frontend", "tdsl.graph.strategy.")
# where a call meets its kernels: the choice of a size class (Kernel.at) is allowed
DISPATCH = "tdsl.graph.strategy.dispatch"
# sympy calls that build nothing: hashing and comparing existing expressions
SYMPY_READS = {"__hash__", "__eq__", "__ne__", "_hashable_content", "_do_eq_sympify"}


def _traced(fn):
    """(fn's result, {"module:function": calls} of compile work and sympy work that ran)."""
    seen = {}

    def watch(frame, event, arg):
        if event != "call":
            return
        mod = frame.f_globals.get("__name__", "")
        name = frame.f_code.co_name
        if (mod.startswith(COMPILER) and not mod.startswith(DISPATCH)) or \
                (mod.startswith("sympy") and name not in SYMPY_READS):
            key = f"{mod}:{name}"
            seen[key] = seen.get(key, 0) + 1
    sys.setprofile(watch)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, seen


def _close(out, ref):
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def test_watch_sees_compile_and_sympy_work():
    """The trace below would see the work it forbids: a build, and a sympy product."""
    import sympy
    _, seen = _traced(lambda: G.build(G.optimize(G.from_onnx(models.mlp(batch="batch", sizes=(8, 4))))))
    assert any(k.startswith("tdsl.graph.frontend") for k in seen), sorted(seen)[:5]
    _, seen = _traced(lambda: sympy.Symbol("n") * 4)
    assert any(k.startswith("sympy") for k in seen), seen


@pytest.mark.parametrize("reserve", [False, True])
def test_first_calls_at_new_sizes_compile_nothing_and_build_no_sympy(reserve):
    m = models.transformer_encoder(batch="batch", seq="sequence", d_model=64, heads=4, ff=128)
    exe = G.build(G.optimize(G.from_onnx(m)))
    if reserve:
        exe.reserve(batch=3, sequence=80)
    kernels = len(kernel_cache.KERNELS)
    rng = np.random.default_rng(3)
    for b, s in [(1, 5), (2, 17), (1, 64), (3, 80), (2, 17), (1, 1)]:
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        out, seen = _traced(lambda: exe.run(x)[0])
        assert not seen, ((b, s), sorted(seen.items())[:10])
        _close(out, models.onnxruntime_run(m, {"input": x})[0])
    assert len(kernel_cache.KERNELS) == kernels


def test_values_of_the_sizes_alone_are_computed_without_compiling():
    """A causal mask computed once per sequence (runstate.size_only) at each new size."""
    m = causal_mask_model()
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(5)
    for shape in [(1, 3), (2, 40), (1, 7), (2, 40)]:
        x = rng.standard_normal(shape).astype(np.float32)
        out, seen = _traced(lambda: exe.run(x)[0])
        assert not seen, (shape, sorted(seen.items())[:10])
        _close(out, models.onnxruntime_run(m, {"x": x})[0])
