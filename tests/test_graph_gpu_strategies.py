"""The GPU strategies of the graph layer (tdsl/graph/strategy/gpu/): every strategy against
onnxruntime on OpenCL (PoCL on the CPU), on the emulated GPU of target "c" and on a CUDA
GPU where there is one; a conv's
epilogue in the same kernel as its sum; the CUDA source compiles with NVRTC and ptxas
finds no spills in the conv and dense kernels; the conv kernel stages tiles in shared
memory and gives each thread a register tile."""
import re

import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph import executor
from tdsl.graph.strategy import dispatch
from tdsl.graph.strategy.gpu import conv_gemm
from tdsl.graph.strategy.gpu.schedule import schedule_gpu
from tdsl.runtime import cuda as rcuda

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from test_graph_conv_grouped import _model as conv_model  # noqa: E402

TARGETS = ["opencl", "c", "cuda"]


@pytest.fixture
def gpu_target(request):
    """The target name, with "c" taking the GPU strategies (emulated blocks and threads)."""
    target = request.param
    if target == "opencl" and not tdsl.runtime.ndarray.opencl(0).exist:
        pytest.skip("no OpenCL device")
    if target == "cuda" and not tdsl.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    saved = dispatch.SCHEDULES["c"], dispatch.FAMILIES["c"]
    if target == "c":
        dispatch.register_schedule("c", schedule_gpu, family="gpu")
    executor.clear_kernel_cache()
    yield target
    dispatch.register_schedule("c", saved[0], family=saved[1])
    executor.clear_kernel_cache()


def _model(nodes, inputs, inits=()):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    g = helper.make_graph(nodes, "m", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, target, kernels=None):
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    exe = G.build(G.optimize(G.from_onnx(model)), target=target)
    got = exe.run(**feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    if kernels is not None:
        assert len(exe.steps) == kernels, [st[0].name for st in exe.steps]
        for st in exe.steps:
            assert len(st[0].module.kernels) == 1, st[0].name
    return exe


# (cin, hw, cout, groups, k, strides, dilation, pads, act, residual)
CONVS = {
    "3x3_s1_relu_residual": (8, 9, 16, 1, 3, (1, 1), (1, 1), None, "relu", True),
    "3x3_s2_bn_relu": (8, 9, 12, 1, 3, (2, 2), (1, 1), None, "relu", False),
    "1x1": (8, 9, 16, 1, 1, (1, 1), (1, 1), [0, 0, 0, 0], None, False),
    "3x3_dilation2": (4, 9, 8, 1, 3, (1, 1), (2, 2), None, "relu", False),
    "groups2": (8, 9, 8, 2, 3, (1, 1), (1, 1), None, "relu", False),
    "groups2_cog6_stride2": (8, 7, 12, 2, 3, (2, 2), (1, 1), None, "relu", False),
    "depthwise_relu_residual": (8, 9, 8, 8, 3, (1, 1), (1, 1), None, "relu", True),
}


@pytest.fixture
def direct_conv(monkeypatch):
    """The direct conv strategy (contraction.py) for every conv, as 1x1 convs of large
    images take it, instead of the column GEMM."""
    monkeypatch.setattr(conv_gemm, "applies", lambda n: False)
    executor.clear_kernel_cache()
    yield
    executor.clear_kernel_cache()


@pytest.mark.parametrize("gpu_target", TARGETS, indirect=True)
@pytest.mark.parametrize("name", list(CONVS))
def test_conv_with_its_epilogue_is_one_kernel(name, gpu_target, direct_conv):
    cin, hw, cout, groups, k, s, d, pads, act, res = CONVS[name]
    model, _ = conv_model(cin, hw, cout, groups, k, s, d, pads, act, residual=res, bn="bn" in name)
    exe = _check(model, gpu_target, kernels=1)
    if gpu_target == "opencl" and groups == 1:
        src = exe.steps[0][0].module.get_source()
        assert "__local" in src and "barrier(" in src


@pytest.mark.parametrize("gpu_target", TARGETS, indirect=True)
def test_short_grid_conv_splits_k_and_keeps_its_epilogue(gpu_target, direct_conv):
    """128 channels of 5x5 outputs leave a GPU's SMs idle even at the smallest tiles:
    partial sums over channel slices, then a kernel that adds them, the bias, relu and the
    residual. (PoCL's few compute units are filled without the split.)"""
    model, _ = conv_model(128, 5, 64, 1, 3, act="relu", residual=True)
    exe = _check(model, gpu_target)
    (step,) = exe.steps
    assert len(step[0].module.kernels) == (1 if gpu_target == "opencl" else 2)


@pytest.mark.parametrize("gpu_target", TARGETS, indirect=True)
@pytest.mark.parametrize("name", [n for n, c in CONVS.items() if c[3] == 1])
def test_conv_as_a_column_gemm(name, gpu_target):
    """Convs with groups 1 and a kernel larger than 1x1 (and 1x1 convs of small images):
    the column buffer, the GEMM (tiled in shared memory), and the epilogue reading the
    GEMM at the output's indices; grouped convs keep the direct strategy."""
    cin, hw, cout, groups, k, s, d, pads, act, res = CONVS[name]
    model, _ = conv_model(cin, hw, cout, groups, k, s, d, pads, act, residual=res, bn="bn" in name)
    exe = _check(model, gpu_target)
    (step,) = exe.steps
    mod = step[0].module
    assert len(mod.kernels) in (3, 4), [kk.name for kk in mod.kernels]     # 4: split K
    if gpu_target == "opencl":
        assert "__local" in mod.get_source() and "barrier(" in mod.get_source()


def test_large_image_1x1_conv_stays_direct_and_3x3_takes_the_column_gemm():
    big_1x1 = G.from_onnx(conv_model(8, 40, 16, 1, 1, pads=[0, 0, 0, 0])[0])
    small_3x3 = G.from_onnx(conv_model(8, 40, 16, 1, 3)[0])
    conv = [n for n in big_1x1.main.nodes() if n.op == "nn.conv2d"]
    assert conv and not conv_gemm.applies(conv[0])              # 1600 pixels > MAX_PIXELS
    conv = [n for n in small_3x3.main.nodes() if n.op == "nn.conv2d"]
    assert conv and conv_gemm.applies(conv[0])
    huge = G.from_onnx(conv_model(64, 224, 64, 1, 3, batch=32)[0])    # a 3.7 GB column buffer
    conv = [n for n in huge.main.nodes() if n.op == "nn.conv2d"]
    assert conv and not conv_gemm.applies(conv[0])


@pytest.mark.parametrize("target", ["opencl", "cuda"])
def test_strided_direct_conv_keeps_its_shared_tiles_within_the_target(target, direct_conv):
    """A 7x7 stride-2 stem as the direct conv: its input slice is twice its tile wide. Sized
    as if it were as wide as the tile, OpenCL's build failed and the group fell back to
    one output per thread (`AUTO_FALLBACKS`), and CUDA's took 57 KB of dynamic shared
    memory. Built here (no device needed): the tiled conv, within the target's limit."""
    model, _ = conv_model(3, 112, 64, 1, 7, (2, 2))
    del dispatch.AUTO_FALLBACKS[:]
    exe = G.build(G.optimize(G.from_onnx(model)), target=target)
    assert dispatch.AUTO_FALLBACKS == []
    (step,) = exe.steps
    assert step[0].scheduled_by == "gpu_contraction"
    limit = tdsl.target.Target(target).shared_memory_bytes
    (k,) = step[0].module.kernels
    assert 0 < k.shared_bytes <= limit and k.dynamic_shared_bytes == 0


def _gemm(m, k, n, relu=True):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"])] + \
        [helper.make_node("Relu" if relu else "Identity", ["g"], ["y"])]
    return _model(nodes, [("x", [m, k])], [("w", rng.standard_normal((k, n)).astype(np.float32)),
                                          ("b", rng.standard_normal(n).astype(np.float32))])


OTHERS = {
    "dense_relu": lambda: _gemm(5, 24, 19),
    "dense_batch1": lambda: _gemm(1, 40, 70, relu=False),
    "matmul": lambda: _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [9, 13]), ("b", [13, 11])]),
    "batch_matmul": lambda: _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                   [("a", [3, 6, 10]), ("b", [3, 10, 7])]),
    "maxpool_pad": lambda: _model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                                    pads=[1, 1, 1, 1])], [("x", [2, 3, 9, 9])]),
    "avgpool_pad": lambda: _model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                                    pads=[1, 1, 1, 1])], [("x", [2, 3, 9, 9])]),
    "softmax": lambda: _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", [4, 37])]),
}


@pytest.mark.parametrize("gpu_target", TARGETS, indirect=True)
@pytest.mark.parametrize("name", list(OTHERS))
def test_dense_matmul_pool_softmax(name, gpu_target):
    _check(OTHERS[name](), gpu_target, kernels=None if name == "softmax" else 1)


def _small_cnn():
    rng = np.random.default_rng(3)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)
    inits = [("w1", w(8, 3, 3, 3)), ("b1", w(8)), ("w2", w(8, 8, 3, 3)), ("b2", w(8)), ("wd", w(8, 1, 3, 3)),
             ("w3", w(16, 8, 1, 1)), ("wf", w(16, 10)), ("bf", w(10))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Add", ["r2", "p1"], ["a2"]),
        helper.make_node("Conv", ["a2", "wd"], ["d"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Conv", ["d", "w3"], ["c3"]),
        helper.make_node("GlobalAveragePool", ["c3"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"]),
    ]
    return _model(nodes, [("x", [2, 3, 20, 20])], inits)


def test_small_cnn_end_to_end_on_opencl():
    if not tdsl.runtime.ndarray.opencl(0).exist:
        pytest.skip("no OpenCL device")
    executor.clear_kernel_cache()
    _check(_small_cnn(), "opencl")


# ---------------------------------------------------------------------------- CUDA

def _cuda_kernel(model):
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed (pip install cuda-bindings nvidia-cuda-nvrtc)")
    exe = G.build(G.optimize(G.from_onnx(model)), target="cuda")
    (step,) = exe.steps
    return step[0].module


def _sm90(mod):
    """The module's one kernel on sm_90 as ptxas compiled it (`module.resources`)."""
    try:
        (r,) = mod.resources("sm_90")
    except tdsl.BuildError as e:
        pytest.skip(str(e))
    return r


@pytest.mark.parametrize("batch", [1, 8])
def test_cuda_conv_tiles_in_shared_memory_without_spills(batch, direct_conv):
    model, _ = conv_model(64, 56, 64, 1, 3, act="relu", residual=True, batch=batch)
    mod = _cuda_kernel(model)
    (k,) = mod.kernels
    assert k.shared_bytes > 0 and "__shared__" in mod.get_source()
    threads = int(np.prod(k.block)) * int(np.prod([int(g.value) for g in k.grid]))
    assert batch * 64 * 56 * 56 / threads >= 4, "fewer than 4 outputs per thread"
    r = _sm90(mod)
    assert r.spill_bytes == 0 and r.shared_bytes == k.shared_bytes


def test_cuda_conv_copies_its_weights_to_shared_memory_16_bytes_at_a_time(direct_conv):
    """A block's weight slice [f, c:c+k_tile, 3, 3] is runs of k_tile*9 consecutive floats:
    the copy moves them 16 bytes at a time, like the GEMM's tiles, with cp.async (the next
    slice's while this one is used), each thread waiting for its copies at the barrier."""
    model, _ = conv_model(64, 56, 64, 1, 3, act="relu", residual=True, batch=1)
    mod = _cuda_kernel(model)
    src = mod.get_source()
    w = mod.kernels[0].params[1].name        # x, w, bias, residual -> out
    assert re.search(rf"tdsl_cp_async16\({w}_shared(_db)? \+ .*, {w} \+ ", src)
    assert "tdsl_cp_async_wait_all(); __syncthreads();" in src
    assert "cp.async.cg.shared.global" in mod.get_source("ptx")
    assert _sm90(mod).spill_bytes == 0


def test_cuda_dense_batch1_splits_k_to_fill_the_sms_without_spills():
    """32 tiles of 32 columns would leave most SMs idle: the reduction is split over
    blockIdx.z, and a second kernel adds the partials and the bias."""
    mod = _cuda_kernel(_gemm(1, 512, 1000, relu=False))
    tiled, total = mod.kernels
    blocks = int(np.prod([int(getattr(g, "value", g)) for g in tiled.grid]))
    assert blocks >= tdsl.target.Target("cuda").sm_count
    try:
        res = mod.resources("sm_90")
    except tdsl.BuildError as e:
        pytest.skip(str(e))
    assert all(r.spill_bytes == 0 for r in res) and res[0].shared_bytes > 0
