"""A dense layer with a symbolic row count (a batch, or batch x sequence: a few tokens),
built once, at every row count from one to past two register tiles, right against numpy,
with one copy of its tile; and a transformer at a few tokens against onnxruntime."""
import os
import sys

import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.codegen import llvm
from tdsl.graph import models
from tdsl.graph.kernel_cache import clear_kernel_cache

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import dense_rows  # noqa: E402


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("K,N", [(256, 256), (1024, 256), (768, 768), (48, 40)])
def test_dynamic_dense_at_one_to_two_tiles_of_rows_matches_numpy(K, N, target):
    """Every row count from one to two register tiles and one more, all run by the one
    kernel (no size class): whole tiles, and the guarded rows of the tile that they
    leave, all of them below a tile."""
    exe = dense_rows.dense_exe(K, N, "batch", target)
    m = dense_rows.dense_model(K, N, "batch")
    w, b = (np.frombuffer(t.raw_data, np.float32).reshape(t.dims) for t in m.graph.initializer)
    ((kernel, _, _),) = exe.steps
    assert kernel.variants == []
    mr = dense_rows.row_tile(K, N, target)
    assert mr == (8 if target == "llvm" and tdsl.target.as_target("llvm").vector_registers >= 32 else 4)
    rng = np.random.default_rng(K + N)
    for rows in range(1, 2 * mr + 2):
        x = rng.standard_normal((rows, K)).astype(np.float32)
        want = x.astype(np.float64) @ w.astype(np.float64) + b
        np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-4, atol=1e-4 * K ** 0.5)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_fewer_rows_than_a_tile_stream_the_weights_once(target, monkeypatch):
    """The kernel's lowered code holds one copy of the register tile: one loop over K,
    its rows each guarded, so any number of rows below a tile (2 to 7 tokens) passes
    over each column block's weights once, not once per row."""
    monkeypatch.setenv("TDSL_CACHE", "0")
    clear_kernel_cache()
    seen, codegen = [], llvm.codegen

    def spy(func, target="llvm"):
        if "dense" in func.name:
            seen.append(str(func))
        return codegen(func, target)
    monkeypatch.setattr(llvm, "codegen", spy)
    dense_rows.dense_exe(768, 768, "batch", target)
    (text,) = seen
    mr = dense_rows.row_tile(768, 768, target)
    assert sum(ln.lstrip().startswith("for k in range(768)") for ln in text.splitlines()) == 1, text
    assert text.count(f"for i in unroll({mr})") == 2, text     # the tile's zeroing and its K loop
    assert "likely(i0.outer * %d + i < batch)" % mr in text, text


def test_transformer_at_a_few_tokens_matches_onnxruntime():
    m = models.transformer_encoder(batch="batch", seq="sequence", d_model=64, heads=4, ff=128)
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(3)
    for b, s in [(1, 2), (1, 3), (1, 7), (2, 3)]:
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        ref = models.onnxruntime_run(m, {"input": x})[0]
        np.testing.assert_allclose(exe.run(x)[0], ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
