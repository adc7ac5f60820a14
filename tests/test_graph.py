"""tdsl.graph: text form, type inference errors, ONNX import errors, passes, memory plan,
executor, and whole networks against onnxruntime."""
import os

import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.errors import GraphError
from tdsl.graph import Call, Const, Function, Module, TensorType, Var

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

HERE = os.path.dirname(__file__)


def _api_example():
    x = Var("input", TensorType((1, 128), "float32"))
    w = Var("weight", TensorType((64, 128), "float32"))
    b = Var("bias", TensorType((64,), "float32"))
    d = Call("nn.dense", [x, w], {"units": 64})
    return Module(Function("main", [x, w, b], [Call("nn.relu", [Call("nn.bias_add", [d, b])])]))


API_TEXT = """def @main(%input: Tensor[(1, 128), float32], %weight: Tensor[(64, 128), float32], %bias: Tensor[(64), float32]) -> Tensor[(1, 64), float32] {
  %0 = nn.dense(%input, %weight, units=64);
  %1 = nn.bias_add(%0, %bias);
  %2 = nn.relu(%1);
  return %2;
}"""


# ---------------------------------------------------------------------------- text form

def test_print_matches_api_md():
    assert str(_api_example()) == API_TEXT


def test_parse_print_roundtrip_plain_and_fused():
    assert str(G.parse(API_TEXT)) == API_TEXT
    from tdsl.graph import models
    mod = G.optimize(G.from_onnx(models.mlp(batch=2, sizes=(32, 48, 10))))
    text = str(mod)
    assert "def @fused_dense_bias_add_relu" in text and "primitive=1" in text
    assert str(G.parse(text, meta=mod.meta)) == text


def test_parse_errors_name_the_line():
    with pytest.raises(GraphError, match="line 2"):
        G.parse(API_TEXT.replace("nn.dense", "nn.densee"))
    with pytest.raises(GraphError, match="meta"):
        G.parse("def @main(%x: Tensor[(20), float32]) -> Tensor[(20), float32] {\n  %0 = add(%x, meta[0]);\n  return %0;\n}")
    with pytest.raises(GraphError, match="used before"):
        G.parse("def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {\n  return %1;\n}")


def test_type_inference_errors():
    x = Var("x", TensorType((1, 3, 8, 8), "float32"))
    w = Const(np.zeros((4, 5, 3, 3), np.float32))
    with pytest.raises(GraphError, match=r"nn.conv2d \(node 'c1'\).*channels"):
        Call("nn.conv2d", [x, w], {}, span="c1")
    with pytest.raises(GraphError, match="do not broadcast"):
        Call("add", [x, Const(np.zeros((5,), np.float32))])
    with pytest.raises(GraphError, match="dtypes differ"):
        Call("add", [x, Const(np.zeros((8,), np.int32))])
    with pytest.raises(GraphError, match="cannot reshape"):
        Call("reshape", [x], {"newshape": [7]})
    with pytest.raises(GraphError, match="unknown attribute"):
        Call("nn.relu", [x], {"alpha": 1})


# ---------------------------------------------------------------------------- ONNX import errors

def _single(op, inputs, outputs, **attrs):
    node = helper.make_node(op, [n for n, _ in inputs], [n for n, _ in outputs], name="the_node", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_operator_is_named():
    m = _single("Celu", [("x", [2, 3])], [("y", [2, 3])])
    with pytest.raises(GraphError, match=r"unsupported ONNX operator 'Celu' \(node 'the_node'\)"):
        G.from_onnx(m)


def test_malformed_files(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage\xff" * 10)
    with pytest.raises(GraphError, match="not a valid ONNX model|holds no ONNX graph"):
        G.from_onnx(str(bad))
    with pytest.raises(GraphError, match="cannot read"):
        G.from_onnx(str(tmp_path / "missing.onnx"))
    m = _single("Relu", [("x", [2, 3])], [("y", [2, 3])])
    m.graph.node[0].input[0] = "nowhere"
    with pytest.raises(GraphError, match="reads 'nowhere'"):
        G.from_onnx(m)


# ---------------------------------------------------------------------------- passes

def _conv_bn_model():
    x = Var("x", TensorType((1, 4, 6, 6), "float32"))
    rng = np.random.default_rng(0)
    w = Const(rng.standard_normal((8, 4, 3, 3)).astype(np.float32))
    c = Call("nn.conv2d", [x, w], {"padding": [1, 1, 1, 1]})
    bn = [Const((rng.random(8) + 0.5).astype(np.float32)) for _ in range(4)]
    y = Call("nn.batch_norm", [c] + bn)
    one = Const(np.ones((1,), np.float32))
    y = Call("multiply", [Call("nn.relu", [y]), one])
    y = Call("add", [y, Const(np.zeros((1,), np.float32))])
    r = Call("reshape", [Call("reshape", [y], {"newshape": [8, 36]})], {"newshape": [1, 288]})
    t = Call("transpose", [Call("transpose", [r], {"axes": [1, 0]})], {"axes": [1, 0]})
    return Module(Function("main", [x], [t]))


def test_passes_fold_simplify_bn_fusion():
    mod = _conv_bn_model()
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    ref = G.build(mod).run(x)[0]
    s = G.simplify(mod)
    ops = [n.op for n in s.main.nodes()]
    assert "multiply" not in ops and "add" not in ops and "transpose" not in ops
    assert ops.count("reshape") == 1
    f = G.fold_batch_norm(s)
    ops = [n.op for n in f.main.nodes()]
    assert "nn.batch_norm" not in ops and "nn.bias_add" in ops
    opt = G.optimize(mod)
    text = str(opt)
    assert "@fused_conv2d_bias_add_relu" in text
    out = G.build(opt).run(x)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("e, ops", [(3.0, ["multiply", "multiply"]), (2.0, ["multiply"]), (0.5, ["sqrt"]),
                                    (1.0, []), (2.5, ["power"])])
def test_simplify_constant_powers(e, ops):
    x = Var("x", TensorType((2, 5), "float32"))
    mod = Module(Function("main", [x], [Call("power", [x, Const(np.full((5,), e, np.float32))])]))
    s = G.simplify(mod)
    assert [n.op for n in s.main.nodes()] == ops
    xv = np.random.default_rng(0).uniform(0.5, 2, (2, 5)).astype(np.float32)
    out = G.build(G.optimize(mod)).run(xv)[0]
    np.testing.assert_allclose(out, xv ** np.float32(e), rtol=1e-6)


def test_constant_folding_and_cse():
    x = Var("x", TensorType((4,), "float32"))
    a = Const(np.arange(4, dtype=np.float32))
    b = Call("exp", [Call("add", [a, a])])                 # all constant: folds
    y1 = Call("multiply", [x, b])
    y2 = Call("multiply", [x, b])                          # same as y1: CSE
    mod = Module(Function("main", [x], [Call("add", [y1, y2])]))
    f = G.fold_constants(mod)
    assert [n.op for n in f.main.nodes()] == ["multiply", "multiply", "add"]
    c = G.eliminate_common_subexpr(f)
    assert [n.op for n in c.main.nodes()] == ["multiply", "add"]
    out = G.build(G.optimize(mod)).run(np.ones(4, np.float32))[0]
    np.testing.assert_allclose(out, 2 * np.exp(2 * np.arange(4)), rtol=1e-5)


def test_memory_plan_reuses_buffers():
    from tdsl.graph import models
    mod = G.optimize(G.from_onnx(models.resnet18(size=32, width=8, num_classes=10)),
                     target="llvm")
    plan = G.plan_memory(mod)
    assert 0 < plan.peak_bytes < plan.total_bytes
    exe = G.build(mod)
    assert exe.peak_memory_bytes == plan.peak_bytes
    # views, no kernel: the flatten before fc, and the last block's shortcut (a 1x1 image,
    # whose NCHW and blocked layouts are one order) that its residual add reads, so the add
    # is the last conv's epilogue
    assert len(plan.aliases) == 2
    assert len(exe.steps) == len(mod.main.nodes()) - 2
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = models.onnxruntime_run(models.resnet18(size=32, width=8, num_classes=10), {"input": x})[0]
    np.testing.assert_allclose(exe.run(x)[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_reshaped_output_is_written_in_place():
    # out1 = reshape(dense(x) + b) is a graph output: the dense writes straight into it
    # (no copy kernel); out2 reads the same intermediate, so it must still hold the data
    x = Var("x", TensorType((6, 8), "float32"))
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    y = Call("add", [Call("nn.dense", [x, Const(w)], {"units": 5}), Const(b)])
    out1 = Call("reshape", [y], {"newshape": [2, 3, 5]})
    out2 = Call("nn.relu", [y])
    mod = G.optimize(Module(Function("main", [x], [out1, out2])))
    plan = G.plan_memory(mod)
    assert len(plan.output_views) == 1
    exe = G.build(mod)
    assert len(exe.steps) == len(mod.main.nodes()) - 1
    xv = rng.standard_normal((6, 8)).astype(np.float32)
    a, r = exe.run(xv)
    ref = xv @ w.T + b
    np.testing.assert_allclose(a, ref.reshape(2, 3, 5), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r, np.maximum(ref, 0), rtol=1e-5, atol=1e-5)


def _split_model(axis):
    """Conv -> Relu -> Split in two along `axis` -> a conv on each half -> Concat: the
    channel split of shufflenet's blocks (axis 1)."""
    from onnx import numpy_helper
    rng = np.random.default_rng(0)

    def w(*shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), f"w{len(inits)}")
    inits = []
    inits.append(w(8, 3, 3, 3))
    inits.append(w(4, 4, 1, 1) if axis == 1 else w(4, 8, 1, 1))
    inits.append(w(4, 4, 1, 1) if axis == 1 else w(4, 8, 1, 1))
    inits.append(numpy_helper.from_array(np.array([4, 4] if axis == 1 else [3, 3], np.int64), "sp"))
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Split", ["r", "sp"], ["a", "b"], axis=axis),
             helper.make_node("Conv", ["a", "w1"], ["ca"]), helper.make_node("Conv", ["b", "w2"], ["cb"]),
             helper.make_node("Concat", ["ca", "cb"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("axis,views", [(1, 2), (2, 0)])
def test_contiguous_slices_are_views_of_their_input(axis, views):
    """A slice that is one contiguous run of its input (channels at batch 1) runs no
    kernel: its consumer reads the input at an offset. Rows of each channel (axis 2) are
    not contiguous and are copied. A GPU plan keeps only views its alignment allows."""
    ort = pytest.importorskip("onnxruntime")
    from tdsl.graph.passes import fuse_ops
    model = _split_model(axis)
    mod = G.optimize(G.from_onnx(model), target="llvm")
    plan = G.plan_memory(mod)
    slices = [n for n in mod.main.nodes() if isinstance(n.op, Function)
              and [m.op for m in n.op.nodes()] == ["strided_slice"]]
    assert len(slices) == 2
    assert sum(n in plan.aliases for n in slices) == views
    exe = G.build(mod)
    assert sum("strided_slice" in k.name for k, _, _ in exe.steps) == 2 - views
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(exe.run(x)[0], ref, rtol=1e-5, atol=1e-5)
    if axis == 1:       # the second half starts 4 * 36 floats (576 bytes) in: not at 128
        assert [plan.alias_offsets[n] for n in slices] == [0, 576]
        aligned = G.plan_memory(fuse_ops(G.optimize(G.from_onnx(model), target="llvm")), 128)
        assert len([1 for n in aligned.order if n in aligned.aliases]) == 1


def test_executor_api_and_errors():
    from tdsl.graph import models
    exe = G.build(G.optimize(G.from_onnx(models.mlp(batch=2, sizes=(16, 32, 8)))))
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    (a,) = exe.run(input=x)
    (b,) = exe(x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a.sum(axis=1), 1, rtol=1e-5)
    with pytest.raises(tdsl.ArgumentError, match="expected shape"):
        exe(np.zeros((3, 16), np.float32))
    with pytest.raises(tdsl.ArgumentError, match="missing input"):
        exe.run()
    bench = exe.benchmark(number=2, repeat=2)
    assert bench["mean"] > 0
    prof = exe.profile(number=2)
    assert len(prof) == len(exe.steps) and all(t >= 0 for _, t, _ in prof)
    seen = []
    names, kernels, walls = exe.trace(3, between=seen.append)
    assert seen == [0, 1, 2] and sorted(names) == sorted(n for n, _, _ in prof)
    assert kernels.shape == (3, len(exe.steps)) and (kernels >= 0).all()
    # each call's time is its kernels' times and the clock reads between them
    np.testing.assert_allclose(kernels.sum(axis=1), walls, rtol=1e-9)
    (c,) = exe(x)       # a trace leaves the outputs and the next run as they were
    np.testing.assert_array_equal(a, c)


def test_identical_layers_compile_once():
    from tdsl.graph import models
    exe = G.build(G.optimize(G.from_onnx(models.resnet18(size=32, width=8, num_classes=10))))
    assert exe.stats["cached"] + exe.stats["compiled"] == len(exe.steps)
    exe2 = G.build(G.optimize(G.from_onnx(models.resnet18(size=32, width=8, num_classes=10, seed=1))))
    assert exe2.stats["compiled"] == 0


# ---------------------------------------------------------------------------- networks vs onnxruntime

ort = pytest.importorskip("onnxruntime")


def _check_network(model, shape, rtol=1e-4):
    from tdsl.graph import models
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    exe = G.build(G.optimize(G.from_onnx(model)))
    out = exe.run(x)[0]
    ref = models.onnxruntime_run(model, {"input": x})[0]
    scale = float(np.abs(ref).max())
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=rtol * scale)
    return exe


def test_resnet18_shaped_matches_onnxruntime():
    from tdsl.graph import models
    exe = _check_network(models.resnet18(batch=1, size=64), (1, 3, 64, 64))
    assert exe.stats["cached"] > 0           # repeated basic blocks share kernels


def test_mobilenetv2_blocks_match_onnxruntime():
    from tdsl.graph import models
    _check_network(models.mobilenetv2_blocks(size=56), (1, 3, 56, 56))


def test_mlp_matches_onnxruntime():
    from tdsl.graph import models
    _check_network(models.mlp(batch=8), (8, 784))


def test_transformer_encoder_matches_onnxruntime():
    from tdsl.graph import models
    _check_network(models.transformer_encoder(seq=32, d_model=128, heads=4, ff=256), (1, 32, 128))


@pytest.mark.parametrize("name", ["torch_cnn.onnx", "torch_attention.onnx"])
def test_torch_exported_models(name):
    path = os.path.join(HERE, "models", name)
    if not os.path.exists(path):
        pytest.skip(f"{name} not committed")
    from tdsl.graph import models
    m = onnx.load(path)
    inp = m.graph.input[0]
    # without a size the batch stays symbolic: built once, run at two batches
    dyn = G.from_onnx(path)
    assert str(dyn.main.params[0].type.shape[0]) == "batch"
    exe = G.build(G.optimize(dyn))
    for n in (1, 3):
        xn = np.random.default_rng(n).standard_normal((n,) + tuple(dyn.main.params[0].type.shape[1:])).astype(np.float32)
        ref = models.onnxruntime_run(m, {inp.name: xn})[0]
        np.testing.assert_allclose(exe.run(xn)[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    mod = G.from_onnx(path, dims={"batch": 2})
    shape = mod.main.params[0].type.shape
    assert shape[0] == 2 and mod.info["dims"] == {"batch": 2}
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    opt = G.optimize(mod)
    assert "Shape" not in str(opt)
    out = G.build(opt).run(x)[0]
    ref = models.onnxruntime_run(m, {inp.name: x})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_visualize_dot_text():
    from tdsl.graph import models
    mod = G.optimize(G.from_onnx(models.mlp(batch=2, sizes=(16, 32, 8))))
    v = mod.visualize()
    text = v if isinstance(v, str) else v.dot
    assert "digraph" in text and "cluster_" in text and "dense" in text


def test_cli_compile(tmp_path, capsys):
    from tdsl.__main__ import main
    from tdsl.graph import models
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(batch=2, sizes=(16, 32, 8)), str(path))
    assert main(["compile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "== optimized ==" in out and "@fused_dense_bias_add_relu" in out
    assert "tdsl latency" in out and "onnxruntime latency" in out and "MISMATCH" not in out
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"nonsense")
    assert main(["compile", str(bad)]) == 1


@pytest.mark.parametrize("target", ["c", "opencl"])
def test_other_targets_when_available(target):
    from tdsl.graph import models
    m = models.mlp(batch=2, sizes=(16, 32, 8))
    try:
        exe = G.build(G.optimize(G.from_onnx(m)), target=target)
        x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
        out = exe.run(x)[0]
    except tdsl.TdslError as e:
        pytest.skip(f"target {target} not available here: {str(e)[:120]}")
    ref = models.onnxruntime_run(m, {"input": x})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("m,k,n,parallel", [(8, 512, 256, True), (8, 64, 64, False)])
def test_dense_of_a_million_multiply_adds_is_split_between_the_cores(m, k, n, parallel):
    """An MLP's 8x512x256 layer ran in 18.9 us on one core and 10.3 us on two; a tiny one
    stays on one (a fork-join costs more than it saves)."""
    from onnx import numpy_helper
    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, n)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w")])
    exe = G.build(G.optimize(G.from_onnx(helper.make_model(g))), target="llvm")
    x = rng.standard_normal((m, k)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0], x @ w, rtol=1e-4, atol=1e-4)
    src = exe.steps[0][0].module.get_source()
    assert ("tdsl_parallel_for" in src or "pthread_create" in src) == parallel
