"""What a kernel of symbolic sizes costs a call beyond the static kernel's (issue: networks
of any size at static speed): no size argument it does not read (each one a conversion in
ctypes per call), and no fork-join where the call's sizes leave too little work for one.
Results are compared with numpy at several sizes."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

import tdsl.graph as G
from tdsl.runtime import threadpool


def _model(nodes, inputs, inits):
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph(nodes, "g", inputs, [y], initializer=inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _scalars(kernel):
    return {p["name"] for p in kernel.module.signature.raw["params"] if p["kind"] == "scalar"}


def test_dense_over_batch_times_sequence_takes_only_their_product():
    """A dense layer over [batch, seq, 64] runs over batch*seq rows: its kernel (and each
    size-class variant) takes that product, which its buffers' shapes hold, and neither
    batch nor seq alone, which none of its stages reads."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 48)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])
    model = _model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                   [x], [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    exe = G.build(G.optimize(G.from_onnx(model)))
    dense = [k for k, _, _ in exe.steps if "dense" in k.name]
    assert dense, [k.name for k, _, _ in exe.steps]
    for k in dense:
        assert k.size_args == (), (k.name, k.size_args)
        for kernel in [k] + [v for _, v in k.variants]:
            scalars = _scalars(kernel)
            assert len(scalars) == 1 and not scalars & {"batch", "seq"}, (kernel.name, scalars)
    for b, s in [(1, 1), (2, 7), (3, 70)]:
        feed = rng.standard_normal((b, s, 64)).astype(np.float32)
        np.testing.assert_allclose(exe.run(feed)[0], feed @ w + bias, rtol=1e-4, atol=1e-4)


def test_squeeze_excite_gate_forks_only_where_the_batch_is_worth_it():
    """The gate of a squeeze-excite block, sigmoid(conv1x1(x) + b) over [batch, 480, 1, 1],
    is a mat-vec whose epilogue the schedule splits between threads at the representative
    batch; at batch 1 (480 elements) a static build runs it serially, and so must the
    kernel of a symbolic batch: no parallel launch at batch 1, launches at batch 64."""
    rng = np.random.default_rng(1)
    c = 480
    w = (rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, 1, 1])
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["v"]), helper.make_node("Sigmoid", ["v"], ["y"])],
                   [x], [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    exe = G.build(G.optimize(G.from_onnx(model)))
    assert any(k.scheduled_by == "conv2d_matvec" for k, _, _ in exe.steps), \
        [(k.name, k.scheduled_by) for k, _, _ in exe.steps]
    for b, forks in [(1, False), (64, True), (1, False)]:
        feed = rng.standard_normal((b, c, 1, 1)).astype(np.float32)
        exe.run(feed)
        before = threadpool.stats().get("launches", 0)
        out = exe.run(feed)[0]
        launched = threadpool.stats().get("launches", 0) - before
        assert (launched > 0) == forks, (b, launched)
        ref = 1 / (1 + np.exp(-(feed[:, :, 0, 0] @ w[:, :, 0, 0].T + bias)))
        np.testing.assert_allclose(out[:, :, 0, 0], ref, rtol=1e-4, atol=1e-5)
