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

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import dense_rows  # noqa: E402


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("K,N", [(256, 256), (48, 40)])
def test_dynamic_dense_at_one_to_nine_rows_matches_numpy(K, N, target):
    exe = dense_rows.dense_exe(K, N, "batch", target)
    m = dense_rows.dense_model(K, N, "batch")
    w, b = (np.frombuffer(t.raw_data, np.float32).reshape(t.dims) for t in m.graph.initializer)
    rng = np.random.default_rng(K + N)
    ran = set()
    for rows in range(1, 10):
        x = rng.standard_normal((rows, K)).astype(np.float32)
        want = x.astype(np.float64) @ w.astype(np.float64) + b
        np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-4, atol=1e-4 * K ** 0.5)
        ran.add(dense_rows.variant(exe, rows))
    # the rows below the kernel's register tile ran on the size class's variant
    assert len(ran) == 2 and any(n.endswith("_small") for n in ran), ran


def test_transformer_at_a_few_tokens_matches_onnxruntime():
    m = models.transformer_encoder(batch="batch", seq="sequence", d_model=64, heads=4, ff=128)
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(3)
    for b, s in [(1, 2), (1, 3), (1, 7), (2, 3)]:
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        ref = models.onnxruntime_run(m, {"input": x})[0]
        np.testing.assert_allclose(exe.run(x)[0], ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
