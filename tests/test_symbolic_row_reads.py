"""A row loop over a run-time number of rows reads the same gamma and beta every row.
LLVM's LICM would hoist all of them before the loop, 32 vectors for a layer norm of 256
floats, and spill them, which at one row (one token) cost more than the row itself: past
half the vector registers, the emitter reads them through a laundered pointer each trip
(codegen/llvm/emitter.py `serial_loop`), so the loop keeps them where they are used, as the
static kernel of one row does; a few (a bias tile) stay hoisted. Static kernels are
unchanged. Results match numpy at one row, two, and around the row loop's chunks."""
import re

import numpy as np
import pytest

import tdsl
import tdsl.graph as G

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

D = 256
ROWS = (1, 2, 7, 8, 9, 33, 300)      # 300: enough work for the forked path


def _layer_norm_model(seq):
    rng = np.random.default_rng(0)
    g = rng.standard_normal(D).astype(np.float32)
    b = rng.standard_normal(D).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, D])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    # x + x first, as a residual stream is: the norm is a kernel of its own input
    nodes = [helper.make_node("Add", ["x", "x"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    graph = helper.make_graph(nodes, "ln", [x], [y],
                              [numpy_helper.from_array(g, "g"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), g, b


def _numpy_layer_norm(x, g, b, eps=1e-5):
    h = (x + x).astype(np.float64)
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return ((h - mu) / np.sqrt(var + eps) * g + b).astype(np.float32)


def _norm_kernel(exe):
    (k,) = [k for k, _, _ in exe.steps if "layer_norm" in getattr(k, "name", "")]
    return k.module


def _vector_spills(asm):
    return re.findall(r"vmov\w*\s+%[xyz]mm\d+, -?\d*\(%rsp\)", asm)


def _build(model, target="llvm"):
    return G.build(G.optimize(G.from_onnx(model), target=target), target=target)


def test_symbolic_layer_norm_spills_no_more_than_the_static_one_row_kernel():
    """For AVX-512 (compiled, not run: the host may lack it): 32 registers, and a row of
    256 floats in 16 of them; the static kernel of one row stores no vector on the stack,
    nor does the symbolic one (it spilled ~20 of gamma and beta before)."""
    avx512 = "llvm -mcpu=skylake-avx512"
    dyn = _norm_kernel(_build(_layer_norm_model("S")[0], avx512)).get_source("asm")
    one = _norm_kernel(_build(_layer_norm_model(1)[0], avx512)).get_source("asm")
    assert len(_vector_spills(dyn)) <= len(_vector_spills(one)) == 0


def test_symbolic_layer_norm_reads_gamma_and_beta_inside_its_row_loop():
    model, g, b = _layer_norm_model("S")
    exe = _build(model)
    assert "llvm.launder.invariant.group" in _norm_kernel(exe).get_source("ll")
    rng = np.random.default_rng(1)
    for rows in ROWS:
        x = rng.standard_normal((1, rows, D)).astype(np.float32)
        np.testing.assert_allclose(exe.run(x)[0], _numpy_layer_norm(x, g, b), rtol=2e-4, atol=2e-4)


def test_static_layer_norm_is_left_as_it_was():
    model, g, b = _layer_norm_model(8)
    exe = _build(model)
    assert "launder" not in _norm_kernel(exe).get_source("ll")
    x = np.random.default_rng(2).standard_normal((1, 8, D)).astype(np.float32)
    np.testing.assert_allclose(exe.run(x)[0], _numpy_layer_norm(x, g, b), rtol=2e-4, atol=2e-4)


def _scale_shift(rows, width):
    """y = x * g + b per row, the row loop over `rows`, a row one unrolled loop of vectors."""
    x = tdsl.placeholder((rows, width), name="x")
    g = tdsl.placeholder((width,), name="g")
    b = tdsl.placeholder((width,), name="b")
    y = tdsl.compute((rows, width), lambda i, j: x[i, j] * g[j] + b[j], name="y")
    s = tdsl.create_schedule(y)
    jo, ji = s[y].split(y.op.axis[1], 16)
    s[y].unroll(jo)
    s[y].vectorize(ji)
    return s, [x, g, b, y]


@pytest.mark.parametrize("width,laundered", [(256, True), (32, False)])
def test_only_what_would_not_fit_in_registers_stays_in_the_row_loop(width, laundered):
    """gamma and beta of 256 floats each (2 KiB) are past half of any x86 vector register
    file; of 32 floats (256 bytes) they are not, and LLVM may keep them hoisted. A row
    count known at build time leaves the loop as it was."""
    from tdsl.codegen import llvm as L
    from tdsl.lower import build_passes
    n = tdsl.var("n")
    for rows, symbolic in ((n, True), (12, False)):
        s, args = _scale_shift(rows, width)
        text, _, _ = L.codegen(build_passes(tdsl.lower(s, args, "scale_shift"), False), "llvm")
        assert ("llvm.launder.invariant.group" in text) == (laundered and symbolic), (width, rows)
    s, args = _scale_shift(n, width)
    f = tdsl.build(s, args)
    rng = np.random.default_rng(width)
    g, b = rng.standard_normal((2, width)).astype(np.float32)
    for rows in (1, 2, 5, 6, 7):
        x = rng.standard_normal((rows, width)).astype(np.float32)
        y = np.zeros_like(x)
        f(x, g, b, y)
        np.testing.assert_allclose(y, x * g + b, rtol=1e-6, atol=1e-6)
