"""A symbolic batch run a group of images at a time (tdsl/graph/image_groups.py): which
networks keep their images apart, how a batch is cut, and that a grouped call returns
what onnxruntime returns for the whole batch."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import image_groups, models
from tdsl.graph.passes import fuse_ops, specialize

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _symbolic(model):
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].ClearField("dim_value")
    dims[0].dim_param = "batch"
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    return model


def _cnn(size, cin=8, tail=None):
    """conv -> max pool -> two convs concatenated (a fire module) -> global pool ->
    flatten -> Gemm, with an optional `tail(b, y)` on the logits."""
    b = models._B(2)
    x = b.conv_bn("input", cin, 16, 3)
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    y = b.node("Concat", [b.conv_bn(x, 16, 16, 1), b.conv_bn(x, 16, 16, 3)], axis=1)
    y = b.node("Flatten", [b.node("GlobalAveragePool", [y])], axis=1)
    y = b.linear(y, 32, 10, gemm=True)
    if tail is not None:
        y = tail(b, y)
    return _symbolic(b.model([("input", [1, cin, size, size])], [y], "cnn"))


def _fused(model):
    return fuse_ops(specialize(G.optimize(G.from_onnx(model), target="llvm"), "llvm")).main


def test_a_cnn_keeps_its_images_apart():
    assert str(image_groups.batch_variable(_fused(_cnn(16)))) == "batch"


@pytest.mark.parametrize("tail", [
    lambda b, y: b.node("Softmax", [y], axis=0),                       # over the images
    lambda b, y: b.node("ReduceMean", [y], axes=[0], keepdims=1),      # a mean of the batch
    lambda b, y: b.node("Transpose", [y], perm=[1, 0]),                # images become columns
    lambda b, y: b.node("Reshape", [y, b.const(np.array([-1], np.int64), "shape")]),  # one row
])
def test_an_operator_across_images_keeps_the_batch_whole(tail):
    assert image_groups.batch_variable(_fused(_cnn(16, tail=tail))) is None


def test_dense_layers_alone_keep_the_batch_whole():
    """An MLP keeps its images apart too, but a smaller group would only re-read its
    weights: the batch of a network without a spatial operator is never cut."""
    assert image_groups.batch_variable(_fused(models.mlp(batch="batch", sizes=(64, 48, 10)))) is None


def test_two_size_variables_keep_the_batch_whole():
    """A 1-D net whose signal length is symbolic beside its batch (bench/dynamic.py's)."""
    model = models.conv1d_net()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for ax, name in {0: "batch", 2: "signal"}.items():
        dims[ax].ClearField("dim_value")
        dims[ax].dim_param = name
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    assert image_groups.batch_variable(_fused(model)) is None


@pytest.mark.parametrize("n,limit,cut", [
    (8, 4, [(0, 4), (4, 8)]), (7, 4, [(0, 4), (4, 7)]), (6, 4, [(0, 3), (3, 6)]),
    (3, 1, [(0, 1), (1, 2), (2, 3)]), (4, 4, [(0, 4)]), (9, 4, [(0, 3), (3, 6), (6, 9)]),
])
def test_a_batch_is_cut_into_the_fewest_even_groups(n, limit, cut):
    assert image_groups.groups(n, limit) == cut


def test_a_group_is_the_largest_power_of_two_within_the_budget():
    def peak(images):
        return 3 * images
    assert image_groups.group_limit(peak, 12) == 4
    assert image_groups.group_limit(peak, 5) == 1      # over the budget at 2: one image
    assert image_groups.group_limit(peak, 10 ** 9, batch_max=8) == 8


def test_a_grouped_batch_matches_onnxruntime():
    """Images of 256x256 x 16 channels take 4 MB each, so half of any last-level cache up
    to 64 MB holds a group of fewer than 8: a batch of 8 runs in groups (odd and even
    batches alike), and each output matches onnxruntime's on the whole batch."""
    model = _cnn(256)
    exe = G.build(G.optimize(G.from_onnx(model)), target="llvm")
    limit = exe.stats.get("image_group")
    assert limit is not None and limit < 8, exe.stats
    for n in (8, 5, 1):
        x = np.random.default_rng(n).standard_normal((n, 8, 256, 256)).astype(np.float32)
        ref = models.onnxruntime_run(model, {"input": x})[0]
        got = exe.run(x)[0]
        assert got.shape == ref.shape
        assert float(np.abs(got - ref).max()) <= 1e-4 * float(np.abs(ref).max())
        again = exe.run(x)[0]       # the outputs are the caller's: a second call leaves them
        np.testing.assert_array_equal(got, again)


def test_a_lower_bound_on_the_batch_keeps_it_whole():
    """A group may not hold fewer images than the batch's declared bounds allow."""
    exe = G.build(G.optimize(G.from_onnx(_cnn(256), dims={"batch": (2, 8)})), target="llvm")
    assert "image_group" not in exe.stats
