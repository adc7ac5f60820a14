"""A static dense whose row count has small divisors only (ViT's 2 x 197 tokens) takes the
register tile a dynamic build's kernel has, its last tile shifted back onto the one before,
not the 2-row tile that divides it (issue 44: 1.37x slower than the dynamic build); a row
count that a good tile divides keeps its tile and its guarded split (strategy/cpu/dense.
static_tile). More rows than columns go outside only where the packed weights stay in
L2 (ViT's at 4 images did not: 1.2-1.3x slower than the dynamic build's order). The
result is numpy's."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph.ir import Const, Function
from tdsl.graph.strategy.cpu import dense
from tdsl.graph.strategy.cpu.schedule import schedule_llvm
from tdsl.graph.strategy.groupdef import GroupDef

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

AVX512, AVX2 = "llvm -mcpu=znver5", "llvm -mcpu=haswell"


@pytest.mark.parametrize("target", [AVX512, AVX2])
def test_rows_of_small_divisors_take_a_shifted_tile(target):
    t = tdsl.target.Target(target)
    for M, N in [(394, 768), (394, 3072), (394, 2304)]:
        rows, cols, shift = dense.static_tile(t, M, N)
        old_rows, old_cols = tdsl.tiling.gemm_tile(t, M, N)
        assert M % old_rows == 0 and shift and M % rows, (M, N, rows, cols)
        # more accumulators than the dividing tile: the FMA chains kept busy
        assert rows * cols > old_rows * old_cols, (M, N, rows, cols, old_rows, old_cols)
        assert rows <= M
    # the dynamic build's row count (64 x 197: a 4-row tile divides it) and BERT's 128
    # tokens keep gemm_tile's tile, guarded (no tail at all)
    for M, N in [(64 * 197, 768), (128, 768), (1024, 768)]:
        assert dense.static_tile(t, M, N) == (*tdsl.tiling.gemm_tile(t, M, N), False), (M, N)
    # fewer rows than any shifted tile: a tile of them all
    for M in (1, 2, 3):
        rows, _, shift = dense.static_tile(t, M, 768)
        assert rows <= M and not shift


def _model(batch, tokens, K, N, seed=0):
    """ONNX: y = x @ w + b over (batch, tokens, K), as a transformer's projections."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((K, N)) / K ** 0.5).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])]
    g = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, tokens, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, tokens, N])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w, b


def _trace(mod, target):
    """The schedule trace of the module's dense group."""
    for n in mod.main.nodes():
        if not isinstance(n.op, Function):
            continue
        g = GroupDef(n.op, {i: a.data for i, a in enumerate(n.args) if isinstance(a, Const)}, target)
        out = g.build()
        if g.anchor is None or g.anchor.tensor.op.tag != "dense_packed":
            continue
        s = tdsl.create_schedule(out)
        schedule_llvm(s, out, g)
        return s.trace
    raise AssertionError("no dense group")


def _row_split(mod, target):
    """The split of the dense's rows."""
    return next(line for line in _trace(mod, target) if "split(" in line)


# "llvm": the host, whose code runs here (AVX2 under TDSL_HOST_CPU=haswell)
@pytest.mark.parametrize("target", ["llvm", AVX2])
@pytest.mark.parametrize("batch,tokens,shifted", [(2, 197, True), (3, 197, None), (2, 64, False)])
def test_static_dense_rows_split_and_result(target, batch, tokens, shifted):
    """2 x 197 rows: the shifted 4-row tile (the dividing 2-row one before the fix); 2 x 64:
    a whole tile, guarded split; 3 x 197: whatever the target's model says, right."""
    K, N = 32, 768
    model, w, b = _model(batch, tokens, K, N, seed=tokens + batch)
    mod = G.optimize(G.from_onnx(model), target=target)
    split = _row_split(mod, target)
    if shifted is not None:
        assert ("tail=shift" in split) == shifted, split
    if shifted:
        assert "factor=4" in split, split
    exe = G.build(mod, target=target)
    x = np.random.default_rng(batch).standard_normal((batch, tokens, K)).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64) + b
    np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-4, atol=1e-4 * K ** 0.5)


@pytest.mark.parametrize("target", ["llvm", AVX2])
@pytest.mark.parametrize("batch,tokens,K,N,cols_outside", [
    (4, 197, 768, 768, True),       # 2.4 MB of weights, 788 rows: columns outside
    (8, 128, 64, 96, False),        # 24 KB of weights, 1024 rows: rows outside
    (1, 64, 64, 96, True),          # fewer rows than columns
])
def test_static_dense_loop_order_and_result(target, batch, tokens, K, N, cols_outside):
    model, w, b = _model(batch, tokens, K, N, seed=K + N)
    mod = G.optimize(G.from_onnx(model), target=target)
    (at,) = [line for line in _trace(mod, target) if "compute_at(" in line]
    # the dense's tile is computed at the output's inner tile loop: rows (i0) when the
    # columns are outside
    assert at.endswith("i0.outer)" if cols_outside else "i1.outer)"), at
    exe = G.build(mod, target=target)
    x = np.random.default_rng(batch).standard_normal((batch, tokens, K)).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64) + b
    np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-4, atol=1e-4 * K ** 0.5)
