"""Networks with symbolic sizes: imported without sizes, built once, run at any size
(issue: networks of any size). Every result is compared with onnxruntime."""
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tdsl
import tdsl.graph as G
from tdsl.graph import kernel_cache
from tdsl.graph import models

pytest.importorskip("onnxruntime")


def _close(out, ref, rtol=1e-4):
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=rtol * max(1.0, float(np.abs(ref).max())))


def _const(name, arr):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, TensorProto.INT64 if arr.dtype == np.int64 else TensorProto.FLOAT, arr.shape, arr.reshape(-1).tolist()))


def shape_subgraph_model():
    """What exporters write around a symbolic batch and sequence: Shape -> Gather ->
    Unsqueeze -> Concat -> Reshape, shape arithmetic, Range over the sequence, Slice
    with a symbolic end, ConstantOfShape and Expand, Where on a shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        _const("i0", np.array(0, np.int64)), _const("i1", np.array(1, np.int64)),
        _const("ax0", np.array([0], np.int64)), _const("two", np.array([2], np.int64)),
        _const("four", np.array([4], np.int64)), _const("eight", np.array(8, np.int64)),
        _const("one", np.array([1], np.int64)), _const("zero1", np.array([0], np.int64)),
        _const("minus1", np.array(-1, np.int64)), _const("start", np.array(0, np.int64)),
        _const("step", np.array(1, np.int64)),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        # (batch, seq, 2, 4)
        helper.make_node("Concat", ["b1", "n1", "two", "four"], ["shape4"], axis=0),
        helper.make_node("Reshape", ["x", "shape4"], ["y4"]),
        # (batch, seq * 8): arithmetic on a size
        helper.make_node("Mul", ["n", "eight"], ["n8"]),
        helper.make_node("Unsqueeze", ["n8", "ax0"], ["n81"]),
        helper.make_node("Concat", ["b1", "n81"], ["shape2"], axis=0),
        helper.make_node("Reshape", ["x", "shape2"], ["y2"]),
        # positions 0..seq-1 added along the sequence
        helper.make_node("Range", ["start", "n", "step"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        _const("ax02", np.array([0, 2], np.int64)),
        helper.make_node("Unsqueeze", ["posf", "ax02"], ["pos3"]),
        helper.make_node("Add", ["x", "pos3"], ["ypos"]),
        # all but the last position: a Slice whose end is computed from the sequence
        helper.make_node("Sub", ["n1", "one"], ["nm1"]),
        helper.make_node("Slice", ["x", "zero1", "nm1", "one"], ["ycut"]),
        # ones of shape (batch, 1, 1) expanded to x's shape, where the -1 entries of a
        # shape would have been replaced by 1
        helper.make_node("Concat", ["b1", "one", "one"], ["shb11"], axis=0),
        helper.make_node("ConstantOfShape", ["shb11"], ["ones"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
        helper.make_node("Equal", ["s", "minus1"], ["neg"]),
        helper.make_node("Where", ["neg", "one", "s"], ["s_fixed"]),
        helper.make_node("Expand", ["ones", "s_fixed"], ["twos"]),
        helper.make_node("Mul", ["x", "twos"], ["ydouble"]),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y4", "y2", "ypos", "ycut", "ydouble")]
    g = helper.make_graph(nodes, "shapes", [x], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_import_keeps_symbolic_dims_and_prints_them():
    m = shape_subgraph_model()
    mod = G.from_onnx(m)
    (x,) = mod.main.params
    assert str(x.type) == "Tensor[(batch, seq, 8), float32]"
    assert [str(t) for t in mod.main.ret_types] == [
        "Tensor[(batch, seq, 2, 4), float32]", "Tensor[(batch, {8*seq}), float32]",
        "Tensor[(batch, seq, 8), float32]", "Tensor[(batch, {seq-1}, 8), float32]",
        "Tensor[(batch, seq, 8), float32]"]
    text = str(mod)
    again = G.parse(text, meta=mod.meta)
    assert str(again) == text
    # dims= still fixes a dimension
    fixed = G.from_onnx(m, dims={"batch": 3})
    assert str(fixed.main.params[0].type) == "Tensor[(3, seq, 8), float32]"


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_shape_subgraphs_match_onnxruntime_at_every_size(target):
    m = shape_subgraph_model()
    exe = G.build(G.optimize(G.from_onnx(m)), target=target)
    rng = np.random.default_rng(0)
    for shape in [(2, 5, 8), (1, 2, 8), (3, 9, 8)]:
        x = rng.standard_normal(shape).astype(np.float32)
        outs = exe.run(x)
        refs = models.onnxruntime_run(m, {"x": x})
        assert len(outs) == len(refs)
        for o, r in zip(outs, refs):
            assert o.shape == r.shape
            _close(o, r)


def test_mlp_built_once_runs_at_any_batch_without_compiling():
    m = models.mlp(batch="batch", sizes=(64, 48, 10))
    mod = G.optimize(G.from_onnx(m))
    assert str(mod.main.params[0].type) == "Tensor[(batch, 64), float32]"
    exe = G.build(mod)
    compiled = exe.stats["compiled"]
    kernels = len(kernel_cache.KERNELS)
    rng = np.random.default_rng(1)
    for n in (1, 7, 7, 3, 32, 32, 7):      # runs at the last call's shape too
        x = rng.standard_normal((n, 64)).astype(np.float32)
        out = exe.run(x)[0]
        assert out.shape == (n, 10)
        _close(out, models.onnxruntime_run(m, {"input": x})[0])
    # the shapes of the last call are checked again whenever they differ
    with pytest.raises(tdsl.GraphError, match="expected rank 2"):
        exe.run(np.zeros((7, 64, 1), np.float32))
    with pytest.raises(tdsl.GraphError, match="axis 1 must be 64"):
        exe.run(np.zeros((7, 65), np.float32))
    # no compile on the request path: every size ran on the kernels built once
    assert exe.stats["compiled"] == compiled and len(kernel_cache.KERNELS) == kernels
    # profile and benchmark run at the last sizes; the printer shows the symbolic ones
    assert exe.profile(number=2) and exe.benchmark(number=2, repeat=1)["min"] > 0
    assert "batch" in str(exe.mod)


def test_transformer_with_symbolic_sequence_matches_onnxruntime():
    m = models.transformer_encoder(batch="batch", seq="sequence", d_model=64, heads=4, ff=128)
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(2)
    for b, s in [(1, 5), (2, 17), (1, 64)]:
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        _close(exe.run(x)[0], models.onnxruntime_run(m, {"input": x})[0])


def _two_inputs(bounds=None):
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 8])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", [a, b], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return G.build(G.from_onnx(m, dims={"batch": bounds} if bounds else None))


def test_inputs_that_disagree_on_a_size_name_the_dimension():
    exe = _two_inputs()
    a = np.ones((2, 8), np.float32)
    with pytest.raises(tdsl.GraphError, match=r"dimension 'batch' is 2 in input 'a' \(axis 0\) but 3 in input 'b'"):
        exe.run(a, np.ones((3, 8), np.float32))
    with pytest.raises(tdsl.GraphError, match=r"input 'b': expected rank 2 \(batch, 8\), got shape \(2, 8, 1\)"):
        exe.run(a, np.ones((2, 8, 1), np.float32))
    with pytest.raises(tdsl.GraphError, match=r"input 'a': axis 1 must be 8, got 9"):
        exe.run(np.ones((2, 9), np.float32), np.ones((2, 9), np.float32))
    np.testing.assert_array_equal(exe.run(a, a)[0], 2 * a)


def test_a_size_outside_its_bounds_is_an_error():
    exe = _two_inputs(bounds=(1, 4))
    x = np.ones((4, 8), np.float32)
    np.testing.assert_array_equal(exe.run(x, x)[0], 2 * x)
    y = np.ones((5, 8), np.float32)
    with pytest.raises(tdsl.GraphError, match=r"dimension 'batch' = 5 \(input 'a' axis 0\) is outside its bounds \[1, 4\]"):
        exe.run(y, y)
    with pytest.raises(tdsl.GraphError, match=r"a range of sizes is \(low, high\)"):
        _two_inputs(bounds=(4, 1))


def test_an_input_shorter_than_a_window_is_an_error_not_a_run():
    """An unpadded strided conv and a max pool of a symbolic length: at lengths that leave
    no output position onnxruntime refuses the input; so does tdsl, naming the operator
    and the size, and it still runs at lengths that fit."""
    import onnxruntime as ort
    w = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3], strides=[2]),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    exe = G.build(G.optimize(G.from_onnx(model)), target="llvm")
    sess = ort.InferenceSession(model.SerializeToString())
    for n in (5, 6, 11):
        x = np.random.default_rng(n).standard_normal((2, 2, n)).astype(np.float32)
        _close(exe.run(x)[0], sess.run(None, {"x": x})[0])
    with pytest.raises(tdsl.GraphError, match=r"nn.conv2d \(node 'Conv'\): its input is shorter than its window at n = 2"):
        exe.run(np.ones((1, 2, 2), np.float32))
    with pytest.raises(tdsl.GraphError, match=r"nn.max_pool2d \(node .MaxPool.\): its input is shorter than its window at n = 4: .* would be 0"):
        exe.run(np.ones((1, 2, 4), np.float32))
    _close(exe.run(np.ones((1, 2, 5), np.float32))[0], sess.run(None, {"x": np.ones((1, 2, 5), np.float32)})[0])


def test_a_slice_of_a_table_bounds_the_size():
    """Positions 0..sequence of a 16-entry table: the network cannot run beyond 16."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "sequence"])
    table = helper.make_tensor("table", TensorProto.FLOAT, [1, 16], np.arange(16, dtype=np.float32).tolist())
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             _const("i1", np.array([1], np.int64)), _const("z", np.array([0], np.int64)),
             _const("two", np.array([2], np.int64)),
             helper.make_node("Slice", ["s", "i1", "two"], ["n"]),
             helper.make_node("Slice", ["table", "z", "n", "i1"], ["t"]),
             helper.make_node("Add", ["x", "t"], ["y"])]
    g = helper.make_graph(nodes, "pos", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[table])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mod = G.from_onnx(m)
    assert mod.info["dim_bounds"] == {"sequence": (1, 16)}
    exe = G.build(G.optimize(mod))
    v = np.ones((1, 16), np.float32)
    _close(exe.run(v)[0], models.onnxruntime_run(m, {"x": v})[0])
    with pytest.raises(tdsl.GraphError, match=r"'sequence' = 17 .* outside its bounds \[1, 16\]"):
        exe.run(np.ones((1, 17), np.float32))


def test_position_embeddings_up_to_the_sequence_run_no_kernel_of_their_own():
    """`pos_table[position_ids[:, :sequence]]` + `type_table[zeros(batch, sequence)]` +
    the word embeddings, as BERT exports them: the gather of every position folds to a
    constant and its rows up to the sequence are a view of it, the token types' gather to
    one row that the add broadcasts, so the only kernel is the word embeddings' gather
    and add, as in a static build, where the position and type terms fold."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])
    rng = np.random.default_rng(3)
    words = helper.make_tensor("words", TensorProto.FLOAT, [50, 8], rng.standard_normal(400).tolist())
    table = helper.make_tensor("table", TensorProto.FLOAT, [32, 8], rng.standard_normal(256).tolist())
    positions = helper.make_tensor("positions", TensorProto.INT64, [1, 32], list(range(32)))
    nodes = [helper.make_node("Shape", ["ids"], ["s"]),
             _const("i1", np.array([1], np.int64)), _const("z", np.array([0], np.int64)),
             _const("two", np.array([2], np.int64)),
             helper.make_node("Slice", ["s", "i1", "two"], ["n"]),
             helper.make_node("Slice", ["positions", "z", "n", "i1"], ["pos"]),
             helper.make_node("Gather", ["table", "pos"], ["pe"], axis=0),
             helper.make_node("Gather", ["words", "ids"], ["we"], axis=0),
             helper.make_node("ConstantOfShape", ["s"], ["types"],
                              value=helper.make_tensor("v", TensorProto.INT64, [1], [1])),
             helper.make_node("Gather", ["type_table", "types"], ["te"], axis=0),
             helper.make_node("Add", ["we", "te"], ["wt"]),
             helper.make_node("Add", ["wt", "pe"], ["y"])]
    type_table = helper.make_tensor("type_table", TensorProto.FLOAT, [2, 8], rng.standard_normal(16).tolist())
    g = helper.make_graph(nodes, "pos", [ids], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[words, table, positions, type_table])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    exe = G.build(G.optimize(G.from_onnx(m)))
    for shape in [(1, 1), (2, 13), (1, 32), (3, 5)]:
        x = rng.integers(0, 50, shape).astype(np.int64)
        _close(exe.run(x)[0], models.onnxruntime_run(m, {"ids": x})[0])
        assert [n.split("#")[0] for n, _, _ in exe.profile(number=1)] == ["fused_take_add"], shape


def causal_mask_model():
    """x (batch, sequence) @ a causal mask (sequence, sequence) built from the sequence
    (Range, compare, Where), as decoders export it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             _const("i1", np.array(1, np.int64)), _const("z", np.array(0, np.int64)),
             _const("ax0", np.array([0], np.int64)), _const("ax1", np.array([1], np.int64)),
             _const("zero", np.array(0.0, np.float32)), _const("minus", np.array(-1.0, np.float32)),
             helper.make_node("Gather", ["s", "i1"], ["n"], axis=0),
             helper.make_node("Range", ["z", "n", "i1"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax1"], ["rc"]),
             helper.make_node("Unsqueeze", ["r", "ax0"], ["rr"]),
             helper.make_node("GreaterOrEqual", ["rc", "rr"], ["causal"]),
             helper.make_node("Where", ["causal", "zero", "minus"], ["mask"]),
             helper.make_node("MatMul", ["x", "mask"], ["y"])]
    g = helper.make_graph(nodes, "mask", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_values_of_the_sizes_alone_are_computed_once_per_size():
    """A causal mask: a static build folds it; built once with symbolic sizes, it is
    computed when a call first meets a sequence, not at every call, and the results
    stay right as the sizes come and go."""
    m = causal_mask_model()
    exe = G.build(G.optimize(G.from_onnx(m)))
    # the values of the sizes alone have no variants for size classes
    assert [bool(k.variants) for k, _, _ in exe.steps if "matmul" not in k.name] == [False, False]
    rng = np.random.default_rng(4)
    for shape in [(1, 1), (2, 9), (3, 33), (2, 9), (1, 1)]:
        v = rng.standard_normal(shape).astype(np.float32)
        _close(exe.run(v)[0], models.onnxruntime_run(m, {"x": v})[0])
        ran = [n.split("#")[0] for n, _, _ in exe.profile(number=1)]
        assert len(ran) == 1 and "matmul" in ran[0], (shape, ran)


def test_values_of_the_sizes_alone_are_not_compiled(monkeypatch):
    """The mask's groups (arange, compare and where) are computed with numpy per size
    (size_values.py), as a static build folds them: only the matmul is compiled."""
    compiled = []
    compile_group = kernel_cache.compile_group

    def spy(fn, target, consts, name, **kw):
        compiled.append(name)
        return compile_group(fn, target, consts, name, **kw)
    monkeypatch.setattr(kernel_cache, "compile_group", spy)
    kernel_cache.clear_kernel_cache()
    exe = G.build(G.optimize(G.from_onnx(causal_mask_model())))
    assert len(compiled) == 1 and "matmul" in compiled[0], compiled
    assert exe.stats["compiled"] == 1 and exe.stats["cached"] == 0, exe.stats


def test_data_dependent_sizes_are_named_errors():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, [1])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("v",)]
    g = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["v", "i"])], "topk", [x, k], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tdsl.GraphError, match=r"TopK .*k must be known"):
        G.from_onnx(m)
    g = helper.make_graph([helper.make_node("NonZero", ["x"], ["v"])], "nz", [x], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tdsl.GraphError, match=r"NonZero"):
        G.from_onnx(m)


def test_concurrent_calls_of_different_sizes():
    m = models.mlp(batch="batch", sizes=(32, 16, 4))
    exe = G.build(G.optimize(G.from_onnx(m)))
    rng = np.random.default_rng(3)
    cases = [rng.standard_normal((n, 32)).astype(np.float32) for n in (1, 2, 5, 9, 16, 3)]
    refs = [models.onnxruntime_run(m, {"input": x})[0] for x in cases]
    errors = []

    def worker(k):
        try:
            for r in range(30):
                i = (k + r) % len(cases)
                out = exe.run(cases[i])[0]
                if out.shape != refs[i].shape or not np.allclose(out, refs[i], rtol=1e-4, atol=1e-5):
                    errors.append((k, i))
        except Exception as e:      # pragma: no cover - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_cli_compile_without_dims(tmp_path, capsys):
    from tdsl.__main__ import main
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(batch="batch", sizes=(16, 32, 8)), str(path))
    assert main(["compile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Tensor[(batch, 16), float32]" in out and "MISMATCH" not in out


needs_opencl = pytest.mark.skipif(not tdsl.opencl(0).exist, reason="no usable OpenCL device")


@needs_opencl
@pytest.mark.parametrize("which", ["cnn", "transformer"])
def test_symbolic_sizes_on_the_opencl_device_executor(which):
    """Built once for OpenCL (the network stays on the device), run at two sizes."""
    if which == "cnn":
        m = models.mobilenetv2_blocks(batch="batch", size=32)
        shapes = [(1, 3, 32, 32), (3, 3, 32, 32)]
    else:
        m = models.transformer_encoder(batch="batch", seq="sequence", d_model=64, heads=4, ff=128)
        shapes = [(1, 5, 64), (2, 17, 64)]
    exe = G.build(G.optimize(G.from_onnx(m), target="opencl"), target="opencl")
    rng = np.random.default_rng(5)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        _close(exe.run(x)[0], models.onnxruntime_run(m, {"input": x})[0])


def test_size_class_with_the_kernels_schedule_shares_its_code():
    """A transpose whose last axis is the run-time sequence gets size classes (a single
    token, a short row); the "short" schedule comes out as the kernel's own, so that
    class runs the kernel itself instead of a copy compiled under another name, while
    the single token's variant is its own. Right at every size."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 256])
    nodes = [_const("shp", np.array([0, 0, 4, 64], np.int64)),
             helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.FLOAT, [], [0.125])),
             helper.make_node("Reshape", ["x", "shp"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Mul", ["t", "c"], ["y"])]
    g = helper.make_graph(nodes, "heads", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    exe = G.build(G.optimize(G.from_onnx(m)))
    ((k, _, _),) = exe.steps
    shared = [v is k for _, v in k.variants]
    assert True in shared and False in shared, [v.name for _, v in k.variants]
    rng = np.random.default_rng(5)
    for shape in [(1, 1), (2, 5), (1, 16), (3, 100)]:
        v = rng.standard_normal(shape + (256,)).astype(np.float32)
        want = v.reshape(shape + (4, 64)).transpose(0, 2, 3, 1) * np.float32(0.125)
        _close(exe.run(v)[0], want)


def test_word_embeddings_gather_matches_onnxruntime_and_checks_its_ids():
    """BERT's word-embedding gather plus a bias and position rows, 256 wide (the vector
    loops that read each token's row once), at 1, 7 and 40 tokens; an id past the
    vocabulary is a BoundsError, not a read of other memory."""
    rng = np.random.default_rng(5)
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])
    pos = helper.make_tensor_value_info("pos", TensorProto.FLOAT, [1, "sequence", 256])
    nodes = [helper.make_node("Gather", ["words", "ids"], ["we"], axis=0),
             helper.make_node("Add", ["we", "bias"], ["wb"]),
             helper.make_node("Add", ["wb", "pos"], ["y"])]
    g = helper.make_graph(nodes, "emb", [ids, pos], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
                                       for n, s in (("words", (97, 256)), ("bias", (1, 1, 256)))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    exe = G.build(G.optimize(G.from_onnx(m)))
    for b, s in [(1, 1), (1, 7), (2, 40)]:
        x = rng.integers(-97, 97, (b, s)).astype(np.int64)
        p = rng.standard_normal((1, s, 256)).astype(np.float32)
        _close(exe.run(x, p)[0], models.onnxruntime_run(m, {"ids": x, "pos": p})[0])
    x[1, 3] = 97
    with pytest.raises(tdsl.BoundsError, match="index 24832"):
        exe.run(x, p)
