"""A dense layer with a symbolic row count (a batch, or batch x sequence: a few tokens),
built once, at every row count from one to past two register tiles, right against numpy,
with one copy of its tile; and a transformer at a few tokens against onnxruntime."""
import os
import sys

import numpy as np
import pytest

import tdsl.graph as G
from tdsl.codegen import llvm
from tdsl.graph import models
from tdsl.graph.kernel_cache import clear_kernel_cache

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import dense_rows  # noqa: E402


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("K,N", [(256, 256), (1024, 256), (768, 768), (48, 40)])
def test_dynamic_dense_at_one_to_two_tiles_of_rows_matches_numpy(K, N, target):
    """Every row count from one to two register tiles and one more: whole tiles and the
    rows they leave (all of them below a tile), in the kernel's one guarded copy of
    its tile where it has the registers to spare (`dense.row_tile`), else in a tile
    shifted back and, below a tile, a variant of one row."""
    exe = dense_rows.dense_exe(K, N, "batch", target)
    m = dense_rows.dense_model(K, N, "batch")
    w, b = (np.frombuffer(t.raw_data, np.float32).reshape(t.dims) for t in m.graph.initializer)
    ((kernel, _, _),) = exe.steps
    mr, whole = dense_rows.row_tile(K, N, target)
    assert len(kernel.variants) == (0 if whole else 1)
    rng = np.random.default_rng(K + N)
    for rows in range(1, 2 * mr + 2):
        x = rng.standard_normal((rows, K)).astype(np.float32)
        want = x.astype(np.float64) @ w.astype(np.float64) + b
        np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-4, atol=1e-4 * K ** 0.5)
        small = not whole and rows < mr
        assert dense_rows.variant(exe, rows) == kernel.name + ("_small" if small else ""), rows


def test_the_tile_is_kept_whole_where_the_registers_allow():
    """AVX-512 (32 vector registers) keeps an 8-row tile whole for BERT's dense shapes;
    AVX2 (16) does not, whatever the tile."""
    for K, N in [(768, 768), (768, 3072), (3072, 768), (1024, 256)]:
        assert dense_rows.row_tile(K, N, "llvm -mcpu=znver4") == (8, True)
        assert dense_rows.row_tile(K, N, "llvm -mcpu=haswell") == (4, False)
    assert not dense_rows.row_tile(256, 32, "llvm -mcpu=haswell")[1]


@pytest.mark.parametrize("target", ["llvm -mcpu=znver4", "llvm -mcpu=haswell"])
def test_fewer_rows_than_a_tile_stream_the_weights_once(target, monkeypatch):
    """Where the tile is kept whole, the kernel's lowered code holds one copy of it: one
    loop over K, its rows each guarded, so any number of rows below a tile (2 to 7
    tokens) passes over each column block's weights once, not once per row, and there
    is no other kernel. Elsewhere the tile is shifted back (no guard) beside a variant
    of one row."""
    monkeypatch.setenv("TDSL_CACHE", "0")
    clear_kernel_cache()
    seen, codegen = {}, llvm.codegen

    def spy(func, target="llvm"):
        if "dense" in func.name:
            seen[func.name] = str(func)
        return codegen(func, target)
    monkeypatch.setattr(llvm, "codegen", spy)
    dense_rows.dense_exe(768, 768, "batch", target)
    mr, whole = dense_rows.row_tile(768, 768, target)
    text = seen.pop("fused_dense_add")
    assert sum(ln.lstrip().startswith("for k in range(768)") for ln in text.splitlines()) == 1, text
    if whole:
        assert not seen
        assert text.count(f"for i in unroll({mr})") == 2, text     # the tile's zeroing and its K loop
        assert "likely(i0.outer * %d + i < batch)" % mr in text, text
    else:
        assert list(seen) == ["fused_dense_add_small"] and "likely" not in text


def test_transformer_at_a_few_tokens_matches_onnxruntime():
    m = models.transformer_encoder(batch="batch", seq="sequence", d_model=64, heads=4, ff=128)
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(3)
    for b, s in [(1, 2), (1, 3), (1, 7), (2, 3)]:
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        ref = models.onnxruntime_run(m, {"input": x})[0]
        np.testing.assert_allclose(exe.run(x)[0], ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
