"""A dense layer with a symbolic row count (a batch, or batch x sequence: a few tokens),
built once, at every row count from one to past its register tile: both its kernel and
its small-rows variant run, each right against numpy; and a transformer at a few tokens
against onnxruntime."""
import os
import sys

import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import models
from tdsl.graph.strategy.cpu import dense

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import dense_rows  # noqa: E402


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("K,N", [(256, 256), (1024, 256), (768, 768), (48, 40)])
def test_dynamic_dense_at_one_to_two_tiles_of_rows_matches_numpy(K, N, target):
    """Every row count from one to two register tiles and one more: the whole tiles,
    the guarded copy of the tile for what they leave (all the rows below a tile), and
    the one-row variant where the tile is tall."""
    exe = dense_rows.dense_exe(K, N, "batch", target)
    m = dense_rows.dense_model(K, N, "batch")
    w, b = (np.frombuffer(t.raw_data, np.float32).reshape(t.dims) for t in m.graph.initializer)
    ((kernel, _, _),) = exe.steps
    mr = dense_rows.row_tile(K, N, target)
    rng = np.random.default_rng(K + N)
    for rows in range(1, 2 * mr + 2):
        x = rng.standard_normal((rows, K)).astype(np.float32)
        want = x.astype(np.float64) @ w.astype(np.float64) + b
        np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-4, atol=1e-4 * K ** 0.5)
        # 2 or more rows run the kernel itself, its one pass over the weights per tile
        # of rows; below a tile, one pass: no variant that runs a row at a time
        one_row = rows == 1 and mr > dense.ONE_ROW_GUARDS
        assert dense_rows.variant(exe, rows) == kernel.name + ("_small" if one_row else ""), rows


def test_transformer_at_a_few_tokens_matches_onnxruntime():
    m = models.transformer_encoder(batch="batch", seq="sequence", d_model=64, heads=4, ff=128)
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(3)
    for b, s in [(1, 2), (1, 3), (1, 7), (2, 3)]:
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        ref = models.onnxruntime_run(m, {"input": x})[0]
        np.testing.assert_allclose(exe.run(x)[0], ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
