"""Every array a host kernel is bound to starts on a cache line (64 bytes, a whole
AVX-512 vector), static and with symbolic sizes alike: constants read as they are
(biases, norm scales, embedding and position tables, scalars; host_buffer.align_constant),
arena slots, slices of a constant the arena views, inputs copied in (HostMemory.new_input)
and outputs, also after the outputs move while the caller holds the last ones. An array
off a line makes most vector loads straddle two lines, and the offset changed from build
to build with where numpy or the protobuf put each array (16-48 bytes past a line).

The constants are moved 16 bytes past a line before each build, so that nothing is
aligned by chance; each build runs against onnxruntime."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import models, runstate
from tdsl.graph.host_buffer import align_constant, zeros_aligned
from tdsl.graph.ir import Const

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

VOCAB, POSITIONS, D = 50, 16, 64


def _embedder():
    """ids (batch, seq) -> LayerNorm(word[ids] + pos[:seq]) W + b, scaled: what a BERT's
    embeddings and first dense layer read, with the position table sliced to the
    sequence by the shape subgraph exporters write."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("word", rng.standard_normal((VOCAB, D))), ("pos", rng.standard_normal((POSITIONS, D))),
        ("g", 1 + 0.1 * rng.standard_normal(D)), ("beta", 0.1 * rng.standard_normal(D)),
        ("w", rng.standard_normal((D, D)) / 8), ("b", rng.standard_normal(D)), ("s", np.array(0.5)))]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("zero", [0]), ("one", [1]), ("two", [2]), ("axis0", [0]))]
    nodes = [helper.make_node("Gather", ["word", "ids"], ["e"]),
             helper.make_node("Shape", ["ids"], ["shape"]),
             helper.make_node("Slice", ["shape", "one", "two"], ["seq"]),
             helper.make_node("Slice", ["pos", "zero", "seq", "axis0"], ["p"]),
             helper.make_node("Add", ["e", "p"], ["ep"]),
             helper.make_node("LayerNormalization", ["ep", "g", "beta"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["n", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Mul", ["hb", "s"], ["y"])]
    g = helper.make_graph(nodes, "embedder",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _off_a_line(mod):
    """Every constant of `mod` moved to 16 bytes past a cache line."""
    for n in mod.main.nodes():
        for a in n.args:
            if isinstance(a, Const) and a.data.nbytes:
                raw = np.empty(a.data.nbytes + 80, np.uint8)
                start = -raw.ctypes.data % 64 + 16
                moved = raw[start:start + a.data.nbytes].view(a.data.dtype).reshape(a.data.shape)
                moved[...] = a.data
                a.data = moved
    return mod


def _bound_arrays(monkeypatch):
    """The arrays every kernel is bound to from now on (each HostMemory.bind)."""
    seen = []
    real = runstate.HostMemory.bind

    def bind(self, module, args):
        seen.extend((module.name, i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray))
        return real(self, module, args)
    monkeypatch.setattr(runstate.HostMemory, "bind", bind)
    return seen


def _off(seen):
    return [(name, i, a.shape, a.ctypes.data % 64) for name, i, a in seen if a.ctypes.data % 64]


def _ids(batch, seq, seed):
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, seq)).astype(np.int64)


def _encoder_input(batch, seq, seed):
    return np.random.default_rng(seed).standard_normal((batch, seq, 256)).astype(np.float32)


CASES = {
    "embedder": (_embedder, _ids, "ids"),
    "encoder": (lambda: models.transformer_encoder(batch="batch", seq="seq"), _encoder_input, "input"),
}


@pytest.mark.parametrize("sizes", [(1, 1), (2, 5)])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "dynamic"])
def test_every_kernel_argument_starts_on_a_line(monkeypatch, name, symbolic, sizes):
    make, feed, input_name = CASES[name]
    model = make()
    seen = _bound_arrays(monkeypatch)
    dims = None if symbolic else {"batch": sizes[0], "seq": sizes[1]}
    exe = G.build(_off_a_line(G.optimize(G.from_onnx(model, dims=dims))))
    held = []
    for seed in range(3):       # the caller holds each output: the next call's move elsewhere
        x = feed(*sizes, seed)
        held.append(exe.run(x)[0])
        ref = models.onnxruntime_run(model, {input_name: x})[0]
        np.testing.assert_allclose(held[-1], ref, rtol=2e-4, atol=2e-4)
    assert len(seen) > 5
    assert _off(seen) == []
    assert all(o.ctypes.data % 64 == 0 for o in held)


def test_an_aligned_constant_is_kept_and_an_unaligned_one_replaced_in_place():
    raw = np.empty(4 * 30 + 80, np.uint8)
    start = -raw.ctypes.data % 64 + 16
    off = raw[start:start + 4 * 30].view(np.float32).reshape(5, 6)
    off[...] = np.arange(30, dtype=np.float32).reshape(5, 6)
    c = Const(off)
    data = align_constant(c, 64)
    assert c.data is data and data.ctypes.data % 64 == 0 and not data.flags.writeable
    np.testing.assert_array_equal(data, np.arange(30, dtype=np.float32).reshape(5, 6))
    assert align_constant(c, 64) is data
    strided = Const(data.T)         # a folded transpose: made contiguous where read as is
    assert align_constant(strided, 64).flags.c_contiguous
    np.testing.assert_array_equal(strided.data, data.T)


@pytest.mark.parametrize("shape, dtype", [((), np.float32), ((3, 5), np.int64), ((0, 4), np.float32)])
def test_zeros_aligned(shape, dtype):
    z = zeros_aligned(shape, dtype, 64)
    assert z.shape == shape and z.dtype == dtype and not z.any()
    assert z.size == 0 or z.ctypes.data % 64 == 0      # an empty array has no data to place
