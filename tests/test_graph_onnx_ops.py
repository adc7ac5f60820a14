"""Single ONNX nodes that real exported networks use, built with onnx.helper and compared
with onnxruntime through from_onnx -> optimize -> build -> run (llvm; the "c" target too for
a few of each family, skipped where no C compiler is available)."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.errors import GraphError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(11)


def _model(op, inputs, consts=None, n_out=1, opset=17, **attrs):
    """A one-node model: `inputs` name -> array (graph inputs), `consts` name -> array
    (initializers, in the node's input order after the graph inputs unless named '' to skip)."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    node_inputs = [("" if n.startswith("_none") else n) for n in names]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, node_inputs, outs, name="node", **attrs)
    g_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items() if not n.startswith("_none")]
    g_out = [helper.make_empty_tensor_value_info(o) for o in outs]
    graph = helper.make_graph([node], "g", g_in, g_out, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _tdsl(model, feeds, target="llvm"):
    exe = G.build(G.optimize(G.from_onnx(model)), target=target)
    return exe.run(*feeds.values())


def check(op, inputs, consts=None, n_out=1, opset=17, target="llvm", rtol=1e-5, sort_last=False, **attrs):
    model = _model(op, inputs, consts, n_out, opset, **attrs)
    ref = _ort(model, inputs)
    try:
        got = _tdsl(model, inputs, target)
    except tdsl.BuildError as e:
        if target != "llvm":
            pytest.skip(f"target {target} not available here: {str(e)[:120]}")
        raise
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape, f"shape {g.shape} != onnxruntime's {r.shape}"
        assert g.dtype == r.dtype, f"dtype {g.dtype} != onnxruntime's {r.dtype}"
        if sort_last:
            g, r = np.sort(g, axis=-1), np.sort(r, axis=-1)
        if r.dtype.kind == "f":
            scale = float(np.abs(r).max()) if r.size else 1.0
            np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol * max(scale, 1e-6))
        else:
            np.testing.assert_array_equal(g, r)
    return got


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*shape, lo=-5, hi=5):
    return RNG.integers(lo, hi, shape).astype(np.int64)


# ---------------------------------------------------------------------------- Einsum

EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 6, 8)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 5, 6), (2, 3, 6, 8)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ji,jk->ik", [(4, 3), (4, 5)]),
    ("ji,kj->ki", [(4, 3), (5, 4)]),
    ("i,i->", [(7,), (7,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bi,bj->bij", [(2, 3), (2, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij->i", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("bik,kj->bij", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),                    # implicit output
    ("ii->i", [(4, 4)]),                             # a diagonal
    ("ii", [(4, 4)]),                                # a trace
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),  # bilinear
]


@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum(eq, shapes):
    check("Einsum", {f"x{i}": f32(*s) for i, s in enumerate(shapes)}, equation=eq, opset=12)


def test_einsum_int64_and_c_target():
    check("Einsum", {"a": i64(3, 4), "b": i64(4, 2)}, equation="ij,jk->ik", opset=12)
    check("Einsum", {"a": f32(2, 3, 4), "b": f32(2, 4, 5)}, equation="bij,bjk->bik", opset=12, target="c")


@pytest.mark.parametrize("eq,shapes,what", [
    ("ij,jk->iz", [(3, 4), (4, 5)], "output index 'z'"),
    ("ij,jk,k->ik", [(3, 4), (4, 5)], "3 operands"),
    ("ijk,jk->i", [(3, 4), (4, 5)], "rank"),
    ("ij,jk->ii", [(3, 4), (4, 5)], "repeats an output index"),
])
def test_einsum_bad_equation_is_named(eq, shapes, what):
    m = _model("Einsum", {f"x{i}": f32(*s) for i, s in enumerate(shapes)}, equation=eq, opset=12)
    with pytest.raises(GraphError, match=rf"Einsum.*'{eq.replace('.', '[.]')}'.*{what}"):
        G.from_onnx(m)


# ---------------------------------------------------------------------------- Softmax

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_any_axis(op, opset, axis):
    # opset 11 flattens to 2-D at `axis`; opset 13 normalizes along `axis` alone
    check(op, {"x": f32(2, 3, 5)}, opset=opset, axis=axis)


@pytest.mark.parametrize("width", [24, 100, 1500])
def test_softmax_rows_short_and_long(width):
    # a short row is split into equal vectors (24: two of 12 on AVX-512), a long one
    # (attention's 1500 keys) into full vectors and a masked tail: both against onnxruntime,
    # with large logits so the row max and the exponential's range both matter
    check("Softmax", {"x": 8 * f32(3, 2, width)}, opset=13, axis=-1)


# ---------------------------------------------------------------------------- Resize

RESIZE = [
    # (mode, coordinate_transformation_mode, nearest_mode, input shape, scales or sizes)
    ("nearest", "asymmetric", "floor", (1, 2, 4, 5), ("scales", [1, 1, 2, 2])),          # torch nearest
    ("nearest", "half_pixel", "round_prefer_floor", (1, 2, 4, 5), ("sizes", [1, 2, 7, 9])),
    ("nearest", "pytorch_half_pixel", "round_prefer_floor", (1, 2, 6, 6), ("sizes", [1, 2, 4, 3])),
    ("nearest", "align_corners", "round_prefer_ceil", (1, 1, 4, 5), ("sizes", [1, 1, 7, 3])),
    ("nearest", "tf_half_pixel_for_nn", "ceil", (1, 1, 4, 5), ("scales", [1, 1, 1.5, 0.6])),
    ("nearest", "asymmetric", "round_prefer_floor", (2, 3, 5), ("scales", [1, 1, 3])),
    ("linear", "half_pixel", None, (1, 2, 4, 5), ("scales", [1, 1, 2, 2])),
    ("linear", "half_pixel", None, (1, 2, 8, 6), ("sizes", [1, 2, 3, 4])),
    ("linear", "pytorch_half_pixel", None, (1, 2, 4, 5), ("sizes", [1, 2, 1, 9])),
    ("linear", "align_corners", None, (1, 2, 4, 5), ("sizes", [1, 2, 7, 9])),
    ("linear", "asymmetric", None, (1, 2, 4, 5), ("scales", [1, 1, 2, 3])),
    ("linear", "half_pixel", None, (2, 3, 7), ("sizes", [2, 3, 12])),                   # 1-D
    ("linear", "align_corners", None, (1, 1, 3, 4, 5), ("scales", [1, 1, 2, 2, 2])),    # trilinear
    ("cubic", "half_pixel", None, (1, 2, 4, 5), ("scales", [1, 1, 2, 2])),
    ("cubic", "align_corners", None, (1, 1, 6, 5), ("sizes", [1, 1, 3, 8])),
]


@pytest.mark.parametrize("mode,coord,nearest,shape,given", RESIZE,
                         ids=[f"{m}-{c}-{n}-{g[0]}" for m, c, n, _, g in RESIZE])
def test_resize(mode, coord, nearest, shape, given):
    kind, v = given
    consts = {"_none_roi": None}
    if kind == "scales":
        consts["scales"] = np.asarray(v, np.float32)
    else:
        consts["_none_scales"] = None
        consts["sizes"] = np.asarray(v, np.int64)
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    if nearest:
        attrs["nearest_mode"] = nearest
    check("Resize", {"x": f32(*shape)}, consts, **attrs)


def test_resize_tables_need_no_checks():
    """Resize reads its source positions from tables the compiler built in range; its
    kernels carry no check of indices read from memory (checked, they ran 10x slower)."""
    x = f32(1, 3, 7, 9)
    model = _model("Resize", {"x": x}, {"_none": np.zeros(0, np.float32),
                                        "s": np.array([1, 1, 2, 2], np.float32)}, mode="linear")
    exe = G.build(G.optimize(G.from_onnx(model)))
    assert all(k.module.signature.record is None for k, _, _ in exe.steps)
    np.testing.assert_allclose(exe.run(x)[0], _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_resize_c_target_and_int_nearest():
    check("Resize", {"x": f32(1, 2, 4, 5)}, {"_none_roi": None, "scales": np.asarray([1, 1, 2, 2], np.float32)},
          mode="linear", coordinate_transformation_mode="half_pixel", target="c")
    check("Resize", {"x": i64(1, 2, 4, 5).astype(np.int32)}, {"_none_roi": None, "scales": np.asarray([1, 1, 2, 3], np.float32)},
          mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 0.5, 0.6]])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset10(scales, mode):
    check("Resize", {"x": f32(1, 2, 6, 5)}, {"scales": np.asarray(scales, np.float32)}, opset=10, mode=mode)


def test_resize_unsupported_mode_is_named():
    m = _model("Resize", {"x": f32(1, 1, 4, 4)}, {"roi": np.zeros(8, np.float32),
                                                   "scales": np.asarray([1, 1, 2, 2], np.float32)},
               mode="linear", coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(GraphError, match="tf_crop_and_resize"):
        G.from_onnx(m)


# ---------------------------------------------------------------------------- convolutions

@pytest.mark.parametrize("x,w,attrs", [
    ((1, 4, 5, 5), (4, 3, 3, 3), dict(strides=[2, 2])),
    ((1, 4, 5, 5), (4, 2, 3, 3), dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ((2, 6, 4, 5), (6, 1, 3, 2), dict(group=3, dilations=[2, 1], pads=[0, 1, 1, 0])),
    ((1, 4, 7), (4, 2, 3), dict(strides=[3], output_padding=[2], pads=[1, 0])),
    ((1, 2, 3, 3), (2, 3, 2, 2), dict(strides=[2, 2], output_shape=[7, 7])),
    ((1, 2, 4, 4), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
])
def test_conv_transpose(x, w, attrs):
    check("ConvTranspose", {"x": f32(*x)}, {"w": f32(*w), "b": f32(w[1] * attrs.get("group", 1))}, **attrs)


@pytest.mark.parametrize("x,w,attrs", [
    ((1, 8, 6, 6), (4, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),            # groups not in {1, C}
    ((2, 12, 7, 7), (24, 3, 3, 3), dict(group=4, strides=[2, 2])),
    ((1, 6, 9), (9, 2, 3), dict(group=3, dilations=[2])),
])
def test_conv_groups(x, w, attrs):
    check("Conv", {"x": f32(*x)}, {"w": f32(*w)}, **attrs)


def test_conv_transpose_c_target():
    check("ConvTranspose", {"x": f32(1, 4, 5, 5)}, {"w": f32(4, 2, 3, 3)}, group=2, strides=[2, 2], target="c")


# ---------------------------------------------------------------------------- MaxPool indices

@pytest.mark.parametrize("shape,attrs", [
    ((2, 3, 6, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 5, 5), dict(kernel_shape=[2, 2])),
    ((1, 2, 9), dict(kernel_shape=[3], strides=[2], dilations=[2])),
    ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 3], strides=[2, 2, 3])),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 6, 7), dict(kernel_shape=[3, 3], strides=[2, 2], storage_order=1)),
])
def test_maxpool_indices(shape, attrs):
    check("MaxPool", {"x": f32(*shape)}, n_out=2, **attrs)


def test_maxpool_indices_ties_and_c_target():
    x = RNG.integers(0, 3, (1, 2, 6, 6)).astype(np.float32)    # many equal maxima
    check("MaxPool", {"x": x}, n_out=2, kernel_shape=[3, 3], strides=[1, 1])
    check("MaxPool", {"x": f32(1, 2, 6, 6)}, n_out=2, kernel_shape=[2, 2], strides=[2, 2], target="c")


# ---------------------------------------------------------------------------- TopK / ArgMax / CumSum / Trilu

@pytest.mark.parametrize("shape,k,attrs", [
    ((3, 10), 4, {}),
    ((3, 10), 4, dict(largest=0)),
    ((4, 6, 5), 3, dict(axis=1)),
    ((4, 6, 5), 4, dict(axis=0, largest=0)),
    ((2, 9), 9, {}),
])
def test_topk(shape, k, attrs):
    check("TopK", {"x": f32(*shape)}, {"k": np.asarray([k], np.int64)}, n_out=2, **attrs)


def test_topk_ties_int64_unsorted_and_c_target():
    check("TopK", {"x": i64(3, 12, lo=0, hi=4)}, {"k": np.asarray([5], np.int64)}, n_out=2)
    check("TopK", {"x": i64(3, 12, lo=0, hi=4)}, {"k": np.asarray([5], np.int64)}, n_out=2, largest=0)
    # sorted=0 leaves the order open: compare the sets
    got = check("TopK", {"x": f32(3, 12)}, {"k": np.asarray([4], np.int64)}, n_out=2, sorted=0, sort_last=True)
    assert got[0].shape == got[1].shape == (3, 4)
    check("TopK", {"x": f32(3, 10)}, {"k": np.asarray([3], np.int64)}, n_out=2, target="c")


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [dict(axis=1), dict(axis=0, keepdims=0), dict(axis=-1, select_last_index=1),
                                   dict(axis=1, keepdims=0, select_last_index=1)])
def test_argmax_argmin(op, attrs):
    check(op, {"x": i64(4, 7, 3, lo=0, hi=3)}, **attrs)       # ties: first or last index
    check(op, {"x": f32(4, 7, 3)}, **attrs)


def test_argmax_c_target():
    check("ArgMax", {"x": f32(4, 9)}, axis=1, target="c")


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum(axis, exclusive, reverse):
    check("CumSum", {"x": f32(3, 4, 5)}, {"axis": np.asarray(axis, np.int64)}, exclusive=exclusive, reverse=reverse)


def test_cumsum_int_and_c_target():
    check("CumSum", {"x": i64(4, 6)}, {"axis": np.asarray(1, np.int32)}, exclusive=1)
    check("CumSum", {"x": f32(4, 6)}, {"axis": np.asarray(0, np.int64)}, reverse=1, target="c")


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 0, 2, 9, -9])
def test_trilu(upper, k):
    consts = {} if k is None else {"k": np.asarray(k, np.int64)}
    check("Trilu", {"x": f32(2, 4, 6)}, consts, upper=upper)


# ---------------------------------------------------------------------------- scatters
# A copy of the data and one update over the indices (strategy/topi_scatter.py); the
# indices are graph inputs (computed at run time). Duplicate indices are applied in the
# indices' order, as onnxruntime applies them (ONNX leaves them undefined without a
# reduction); negative ones count from the end.

SCATTER_REDUCTIONS = ["none", "add", "mul", "max", "min"]


def _scatter_target(target):
    if target == "opencl" and _opencl_reason():
        pytest.skip("no working OpenCL device: " + _opencl_reason().splitlines()[0])


@pytest.mark.parametrize("target", ["llvm", "c", "opencl"])
@pytest.mark.parametrize("reduction", SCATTER_REDUCTIONS)
def test_scatter_nd(reduction, target):
    _scatter_target(target)
    x = f32(3, 4, 5)
    # slices (pure trailing dimension): (0, 1) three times, once as (-3, -3)
    idx = np.asarray([[0, 1], [2, 3], [0, 1], [1, 0], [-3, -3]], np.int64)
    check("ScatterND", {"x": x, "i": idx, "u": f32(5, 5)}, opset=18, reduction=reduction, target=target)
    # whole elements (no pure variable): a 2-D index tensor with a repeated element
    idx = np.asarray([[[0, 1, 2], [2, 3, 4]], [[0, 1, 2], [-1, 0, -5]]], np.int64)
    check("ScatterND", {"x": x, "i": idx, "u": f32(2, 2)}, opset=18, reduction=reduction, target=target)
    # whole rows
    idx = np.asarray([[2], [0], [2]], np.int64)
    check("ScatterND", {"x": x, "i": idx, "u": f32(3, 4, 5)}, opset=18, reduction=reduction, target=target)


@pytest.mark.parametrize("target", ["llvm", "c", "opencl"])
@pytest.mark.parametrize("reduction", SCATTER_REDUCTIONS)
def test_scatter_elements(reduction, target):
    _scatter_target(target)
    # along axis 0, indices as wide as the data (columns are pure variables), duplicates
    idx = np.asarray([[1, 0, 2, 0], [0, -3, 1, 2], [1, 1, -1, 2]], np.int64)
    check("ScatterElements", {"x": f32(3, 4), "i": idx, "u": f32(3, 4)}, opset=18,
          reduction=reduction, axis=0, target=target)
    # along the last axis, indices narrower than the data on the other axis
    idx = np.asarray([[1, 0, 1], [4, -1, 4]], np.int64)
    check("ScatterElements", {"x": f32(3, 5), "i": idx, "u": f32(2, 3)}, opset=18,
          reduction=reduction, axis=-1, target=target)
    # a middle axis of a 3-D tensor, integer data
    idx = RNG.integers(-4, 4, (2, 6, 3)).astype(np.int64)
    check("ScatterElements", {"x": i64(2, 4, 3), "i": idx, "u": i64(2, 6, 3)}, opset=18,
          reduction=reduction, axis=1, target=target)


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
@pytest.mark.parametrize("target", ["llvm", "c", "opencl"])
def test_scatter_index_out_of_range_is_an_error_not_a_write(op, target):
    """An index outside the axis raises tdsl.BoundsError naming the operator and the input
    that held it; nothing is written outside the output (the next run is right)."""
    _scatter_target(target)
    x = f32(4, 6)
    good = np.asarray([[1], [-4], [3]], np.int64) if op == "ScatterND" else \
        RNG.integers(-6, 6, (4, 6)).astype(np.int64)
    upd = f32(3, 6) if op == "ScatterND" else f32(4, 6)
    kw = {} if op == "ScatterND" else {"axis": 1}
    model = _model(op, {"x": x, "i": good, "u": upd}, opset=18, reduction="add", **kw)
    try:
        exe = G.build(G.optimize(G.from_onnx(model)), target=target)
    except tdsl.BuildError as e:
        pytest.skip(f"target {target} not available here: {str(e)[:120]}")
    ref = _ort(model, {"x": x, "i": good, "u": upd})[0]
    np.testing.assert_allclose(exe.run(x, good, upd)[0], ref, rtol=1e-6)
    n = x.shape[0] if op == "ScatterND" else x.shape[1]
    for bad in (n, 2 ** 32 + 1, -n - 1):
        idx = good.copy()
        idx.flat[-1] = bad
        with pytest.raises(tdsl.BoundsError, match="outside its extent") as ei:
            exe.run(x, idx, upd)
        assert ("scatter_nd" if op == "ScatterND" else "scatter_elements") in str(ei.value)
        assert "'i'" in str(ei.value).split("network's")[1], ei.value
    np.testing.assert_allclose(exe.run(x, good, upd)[0], ref, rtol=1e-6)


def test_scatter_onnx_errors_are_named():
    m = _model("ScatterND", {"x": f32(3, 4), "i": np.zeros((1, 1), np.int64), "u": f32(1, 4)},
               opset=18, reduction="sum")
    with pytest.raises(GraphError, match="ScatterND: unknown reduction 'sum'"):
        G.from_onnx(m)
    m = _model("ScatterElements", {"x": f32(3, 4), "i": np.zeros((2, 5), np.int64), "u": f32(2, 5)}, axis=0)
    with pytest.raises(GraphError, match="do not fit data"):
        G.from_onnx(m)


# ---------------------------------------------------------------------------- reductions

REDUCE_OPS = ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
              "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, -1], 0), ([], 1), (None, 0)])
def test_reductions_axes_input_opset18(op, axes, keepdims):
    x = np.abs(f32(3, 4, 5)) + 0.5 if op == "ReduceLogSum" else f32(3, 4, 5)
    consts = {} if axes is None else {"axes": np.asarray(axes, np.int64)}
    check(op, {"x": x}, consts, opset=18, keepdims=keepdims)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reductions_noop_with_empty_axes(op):
    x = np.abs(f32(3, 4)) + 0.5 if op == "ReduceLogSum" else f32(3, 4)
    check(op, {"x": x}, {"axes": np.zeros(0, np.int64)}, opset=18, noop_with_empty_axes=1)
    check(op, {"x": x}, {}, opset=18, noop_with_empty_axes=1)


def test_reductions_int_and_opset13_attribute():
    check("ReduceSumSquare", {"x": i64(3, 4)}, opset=13, axes=[1])
    check("ReduceL1", {"x": i64(3, 4)}, opset=13, axes=[0], keepdims=0)
    check("ReduceLogSumExp", {"x": f32(3, 4) * 40}, opset=13, axes=[1])     # large: needs the max shift
    check("ReduceL2", {"x": f32(3, 4)}, opset=18, target="c")


# ---------------------------------------------------------------------------- element-wise, casts, shapes

@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_broadcast_int64(op):
    check(op, {"a": i64(3, 1, 4), "b": i64(5, 1)})
    check(op, {"a": f32(2, 3), "b": f32(3)})


def test_bool_logic_and_not():
    a, b = RNG.random((3, 4)) > 0.5, RNG.random((4,)) > 0.5
    check("Equal", {"a": a, "b": b})
    check("Not", {"a": a})
    check("And", {"a": a, "b": b})
    check("Or", {"a": a, "b": b})


@pytest.mark.parametrize("src,dst", [(np.int64, TensorProto.FLOAT), (np.float32, TensorProto.INT32),
                                     (np.float32, TensorProto.BOOL), (np.bool_, TensorProto.FLOAT),
                                     (np.int64, TensorProto.BOOL), (np.float32, TensorProto.INT64)])
def test_cast(src, dst):
    x = (f32(3, 4) * 10).astype(src)
    check("Cast", {"x": x}, to=dst)


def test_expand_and_range():
    check("Expand", {"x": f32(3, 1)}, {"s": np.asarray([2, 1, 4], np.int64)})
    check("Expand", {"x": i64(1, 4)}, {"s": np.asarray([3, 1], np.int64)})
    m = _model("Range", {}, {"s": np.asarray(2, np.int64), "l": np.asarray(11, np.int64), "d": np.asarray(3, np.int64)})
    (got,) = G.build(G.optimize(G.from_onnx(m))).run()
    np.testing.assert_array_equal(got, _ort(m, {})[0])


def test_mod_hard_activations_nan_inf_gather_elements():
    a, b = i64(4, 5, lo=-9, hi=9), i64(5, lo=1, hi=4) * np.where(RNG.random(5) > 0.5, 1, -1)
    check("Mod", {"a": a, "b": b})
    check("Mod", {"a": a, "b": b}, fmod=1)
    check("Mod", {"a": f32(4, 5) * 5, "b": f32(5)}, fmod=1)
    check("HardSwish", {"x": f32(3, 7) * 4})
    check("HardSigmoid", {"x": f32(3, 7) * 4}, alpha=0.3, beta=0.4)
    x = f32(3, 5)
    x[0, 1], x[1, 2], x[2, 3] = np.nan, np.inf, -np.inf
    check("IsNaN", {"x": x})
    check("IsInf", {"x": x})
    check("IsInf", {"x": x}, detect_negative=0)
    check("GatherElements", {"x": f32(3, 4)}, {"i": np.asarray([[0, -1], [2, 1], [-3, 0]], np.int64)}, axis=1)
    check("Mod", {"a": a, "b": b}, target="c")
    check("IsNaN", {"x": x}, target="c")


def test_unsupported_operators_are_all_named():
    nodes = [helper.make_node("Celu", ["x"], ["a"], name="n1"),
             helper.make_node("Shrink", ["a"], ["b"], name="n2"),
             helper.make_node("Relu", ["b"], ["y"], name="n3")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GraphError, match=r"unsupported ONNX operator 'Celu'.*all unsupported operators: Celu, Shrink"):
        G.from_onnx(m)


# ---------------------------------------------------------------------------- symbolic dimensions

def _dynamic_model():
    """x: (batch, seq, 4), m: (batch, seq): y = reshape(x, shape(x)[0], -1) * 2 and
    z = m + 1, where the reshape target comes from Shape -> Gather -> Concat, as torch
    exports it; u: ('', 3) has an unnamed unknown first dimension."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Mul", ["r", "two"], ["y"]),
        helper.make_node("Add", ["m", "one"], ["z"]),
        helper.make_node("Relu", ["u"], ["w"]),
    ]
    inits = [numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
             numpy_helper.from_array(np.asarray([0], np.int64), "zero1"),
             numpy_helper.from_array(np.asarray([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.asarray(2, np.float32), "two"),
             numpy_helper.from_array(np.asarray(1, np.float32), "one")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4]),
           helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", "seq"]),
           helper.make_tensor_value_info("u", TensorProto.FLOAT, [None, 3])]
    outs = [helper.make_empty_tensor_value_info(n) for n in ("y", "z", "w")]
    g = helper.make_graph(nodes, "g", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_symbolic_dims_without_sizes_stay_symbolic():
    m = _dynamic_model()
    mod = G.from_onnx(m)
    # named after the dim_params; the unnamed unknown after its input and axis
    assert [str(p.type) for p in mod.main.params] == [
        "Tensor[(batch, seq, 4), float32]", "Tensor[(batch, seq), float32]", "Tensor[(u_0, 3), float32]"]
    assert str(mod.main.ret_types[0]) == "Tensor[(batch, {4*seq}), float32]"
    exe = G.build(G.optimize(mod))
    for b, q, u in [(2, 5, 4), (1, 1, 7)]:
        feeds = {"x": f32(b, q, 4), "m": f32(b, q), "u": f32(u, 3)}
        for g, r in zip(exe.run(*feeds.values()), _ort(m, feeds)):
            np.testing.assert_allclose(g, r, rtol=1e-6)
    # one given, the others symbolic
    part = G.from_onnx(m, dims={"batch": 2, "seq": 3})
    assert [str(p.type) for p in part.main.params][2] == "Tensor[(u_0, 3), float32]"
    with pytest.raises(GraphError, match=r"dims= names \['sequence'\].*\['batch', 'seq', 'u\[0\]'\]"):
        G.from_onnx(m, dims={"batch": 2, "sequence": 3})
    with pytest.raises(GraphError, match=r"'batch' is 2 elsewhere but shape\['m'\] gives 5"):
        G.from_onnx(m, dims={"batch": 2, "seq": 3}, shape={"m": (5, 3), "u": (1, 3)})
    with pytest.raises(GraphError, match=r"axis 2 is fixed at 4"):
        G.from_onnx(m, shape={"x": (2, 3, 5), "u": (1, 3)})
    with pytest.raises(GraphError, match=r"dims\['batch'\] = -1"):
        G.from_onnx(m, dims={"batch": -1, "seq": 3}, shape={"u": (1, 3)})


def test_symbolic_dims_given_build_and_fold():
    m = _dynamic_model()
    mod = G.from_onnx(m, dims={"batch": 2, "seq": 5}, shape={"u": (4, 3)})
    assert [p.type.shape for p in mod.main.params] == [(2, 5, 4), (2, 5), (4, 3)]
    assert mod.info["dims"] == {"batch": 2, "seq": 5, "u[0]": 4}
    opt = G.optimize(mod)
    assert "int64" not in str(opt)                  # the shape arithmetic folded away
    feeds = {"x": f32(2, 5, 4), "m": f32(2, 5), "u": f32(4, 3)}
    got = G.build(opt).run(*feeds.values())
    for g, r in zip(got, _ort(m, feeds)):
        np.testing.assert_allclose(g, r, rtol=1e-6)
    # default_dim is an explicit opt-in for every dimension left
    assert [p.type.shape for p in G.from_onnx(m, default_dim=1).main.params] == [(1, 1, 4), (1, 1), (1, 3)]


def test_cli_compile_dims(tmp_path, capsys):
    from tdsl.__main__ import main
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x_info], [y_info]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert main(["compile", str(path)]) == 0           # symbolic: built once, run at two batches
    out = capsys.readouterr().out
    assert "Tensor[(batch, 8), float32]" in out and "at batch=8" in out and "MISMATCH" not in out
    assert main(["compile", str(path), "--dims", "batch=3"]) == 0
    out = capsys.readouterr().out
    assert "Tensor[(3, 8), float32]" in out and "MISMATCH" not in out


# ---------------------------------------------------------------------------- text form

@pytest.mark.parametrize("op,inputs,consts,n_out,attrs", [
    ("TopK", {"x": (3, 10)}, {"k": np.asarray([4], np.int64)}, 2, {}),
    ("MaxPool", {"x": (1, 2, 6, 6)}, {}, 2, dict(kernel_shape=[2, 2], storage_order=1)),
    ("CumSum", {"x": (3, 4)}, {"a": np.asarray(1, np.int64)}, 1, dict(reverse=1)),
    ("Trilu", {"x": (3, 4)}, {"k": np.asarray(1, np.int64)}, 1, dict(upper=0)),
    ("HardSigmoid", {"x": (3, 4)}, {}, 1, dict(alpha=0.3)),
    ("IsInf", {"x": (3, 4)}, {}, 1, dict(detect_negative=0)),
    ("GatherElements", {"x": (3, 4)}, {"i": np.asarray([[1], [0], [3]], np.int64)}, 1, dict(axis=1)),
], ids=lambda v: v if isinstance(v, str) else None)
def test_new_operators_print_and_parse_back(op, inputs, consts, n_out, attrs):
    feeds = {k: f32(*s) for k, s in inputs.items()}
    m = _model(op, feeds, consts, n_out, **attrs)
    for fuse in (False, True):
        mod = G.optimize(G.from_onnx(m), fuse=fuse)
        again = G.parse(str(mod), meta=mod.meta)
        assert str(again) == str(mod)
        for a, b in zip(G.build(again).run(*feeds.values()), _ort(m, feeds)):
            # atol: a reversed CumSum that cancels to ~0.01 differs from onnxruntime's
            # summation order in its last bit (6e-8), beyond 1e-6 of the value
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------- Gather bounds

def _opencl_reason():
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return "pyopencl is not installed"
    from tdsl.runtime import opencl as rocl
    return rocl.unusable_reason()


@pytest.mark.parametrize("op,axis", [("Gather", 0), ("Gather", 1), ("GatherElements", 1)])
@pytest.mark.parametrize("target", ["llvm", "c", "opencl"])
def test_gather_index_out_of_range_is_an_error_not_a_read(op, axis, target):
    """An index read from the data outside the axis raises tdsl.BoundsError, like
    onnxruntime's error, whatever it would address otherwise: the axis's size along an
    inner axis lands in the next row, 2^32 + 1 wraps to 1 in int32, -n - 1 counts back
    past the start. In range (negative ones from the end) the results are onnxruntime's.
    On OpenCL the network's run reads the kernels' records back after it finishes."""
    if target == "opencl" and _opencl_reason():
        pytest.skip("no working OpenCL device: " + _opencl_reason().splitlines()[0])
    x = f32(4, 6)
    shape = (3,) if op == "Gather" else (4, 3)
    n = x.shape[axis]
    good = RNG.integers(-n, n, shape).astype(np.int64)
    model = _model(op, {"x": x, "i": good}, axis=axis)
    try:
        exe = G.build(G.optimize(G.from_onnx(model)), target=target)
    except tdsl.BuildError as e:
        pytest.skip(f"target {target} not available here: {str(e)[:120]}")
    exe.profile(1)      # before any input is set: the inputs hold zeros, valid indices
    np.testing.assert_array_equal(exe.run(x, good)[0], _ort(model, {"x": x, "i": good})[0])
    for bad in (n, 2 ** 32 + 1, -n - 1):
        idx = good.copy()
        idx.flat[-1] = bad
        with pytest.raises(tdsl.BoundsError, match="outside its extent") as ei:
            exe.run(x, idx)
        # named in the network's terms: the operator and the input that held the index
        assert ("gather_elements" if op == "GatherElements" else "take") in str(ei.value)
        assert "'i'" in str(ei.value).split("network's")[1], ei.value
    np.testing.assert_array_equal(exe.run(x, good)[0], _ort(model, {"x": x, "i": good})[0])
