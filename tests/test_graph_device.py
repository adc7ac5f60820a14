"""The graph executor on a GPU (issue 20, item 1): weights uploaded once, one device arena
per run state, a run copies its inputs in and its outputs out and allocates nothing.
OpenCL runs here on PoCL; CUDA is checked for building (no GPU here) and, through a fake
driver, for what a run asks the driver to do."""
import threading

import numpy as np
import pytest

import tdsl
import tdsl.graph as G

pytest.importorskip("onnx")

needs_opencl = pytest.mark.skipif(not tdsl.opencl(0).exist, reason="no usable OpenCL device")


def _build(model, target):
    return G.build(G.optimize(G.from_onnx(model)), target=target)


@pytest.fixture(scope="module")
def cnn():
    from tdsl.graph import models
    m = models.resnet18(size=32, width=8, num_classes=10)
    return m, _build(m, "opencl")


@pytest.fixture(scope="module")
def mlp():
    from tdsl.graph import models
    m = models.mlp(batch=2, sizes=(16, 32, 8))
    return m, _build(m, "opencl")


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@needs_opencl
@pytest.mark.parametrize("which", ["cnn", "mlp"])
def test_opencl_matches_onnxruntime_and_llvm(which, request):
    from tdsl.graph import models
    m, exe = request.getfixturevalue(which)
    x = _x(exe.inputs["input"].shape)
    ref = models.onnxruntime_run(m, {"input": x})[0]
    np.testing.assert_allclose(exe.run(x)[0], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(exe.run(x)[0], _build(m, "llvm").run(x)[0], rtol=1e-4, atol=1e-5)


@needs_opencl
@pytest.mark.parametrize("which", ["cnn", "mlp"])
def test_runs_allocate_nothing_and_copy_only_inputs_and_outputs(which, request):
    _, exe = request.getfixturevalue(which)
    dev = tdsl.opencl(0)
    x = _x(exe.inputs["input"].shape)
    exe.run(x)
    before = dev.counts()
    for _ in range(3):
        exe.run(x)
    after = dev.counts()
    assert after["allocs"] == before["allocs"] and after["alloc_bytes"] == before["alloc_bytes"]
    assert after["to_device"] - before["to_device"] == 3 * len(exe.input_names)
    assert after["to_host"] - before["to_host"] == 3 * len(exe.mod.main.outputs)
    assert after["on_device"] == before["on_device"]
    assert exe._pool.made == 1


@needs_opencl
def test_build_allocates_weights_and_one_arena(mlp):
    from tdsl.graph import models
    m = models.mlp(batch=2, sizes=(16, 32, 8), seed=3)
    dev = tdsl.opencl(0)
    c0 = dev.counts()
    exe = _build(m, "opencl")
    c1 = dev.counts()
    consts = {id(a) for _, args, _ in exe.steps for a in args if isinstance(a, tdsl.nd.NDArray)}
    # each weight uploaded once, and the run state's inputs zeroed once (a benchmark before
    # any input is set reads zeros, not garbage)
    assert c1["to_device"] - c0["to_device"] == len(consts) + len(exe.input_names)
    # the weights, the arena, the input, the output and the buffers between the kernels of
    # one group (DeviceModule.host_buffers): bound once per run state, never per run
    between = sum(len(k.module.host_buffers) for k, _, _ in exe.steps)
    assert c1["allocs"] - c0["allocs"] == len(consts) + 1 + len(exe.input_names) + 1 + between


@needs_opencl
def test_device_arrays_in_and_out(cnn):
    _, exe = cnn
    dev = tdsl.opencl(0)
    x = _x((1, 3, 32, 32), 5)
    ref = exe.run(x)[0]
    xd = tdsl.nd.array(x, dev)
    before = dev.counts()
    out = exe.run(xd, output="device")
    after = dev.counts()
    assert isinstance(out[0], tdsl.nd.NDArray) and out[0].device == dev
    assert after["to_device"] == before["to_device"] and after["to_host"] == before["to_host"]
    assert after["on_device"] - before["on_device"] == 2      # input and output, on the device
    np.testing.assert_allclose(out[0].numpy(), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(exe.run(input=xd)[0], ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(tdsl.ArgumentError):
        exe.run(tdsl.nd.array(np.zeros((1, 3, 16, 16), np.float32), dev))


@needs_opencl
def test_two_threads_share_one_gpu_executor(cnn):
    _, exe = cnn
    xs = [_x((1, 3, 32, 32), 10 + i) for i in range(2)]
    refs = [exe.run(x)[0] for x in xs]
    barrier, errors, results = threading.Barrier(2), [], [[], []]

    def body(i):
        try:
            barrier.wait()
            for _ in range(15):
                results[i].append(exe(xs[i])[0])
        except BaseException as e:      # noqa: BLE001 - re-raised below
            errors.append(e)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):
        for out in results[i]:
            np.testing.assert_allclose(out, refs[i], rtol=1e-6, atol=1e-6)
    assert exe._pool.made <= 2


@needs_opencl
def test_benchmark_and_profile_on_the_device(mlp):
    _, exe = mlp
    exe.set_input("input", _x((2, 16)))
    assert exe.benchmark(number=2, repeat=1)["mean"] > 0
    text = exe.profile_text(number=2)
    assert "fused_dense" in text and "total" in text


def test_plan_alignment_keeps_opencl_views_aligned():
    from tdsl.graph import models
    from tdsl.graph.passes import plan_memory
    mod = G.optimize(G.from_onnx(models.resnet18(size=32, width=8, num_classes=10)))
    from tdsl.graph.passes import fuse_ops
    plan = plan_memory(fuse_ops(mod), 128)
    assert all(off % 128 == 0 for off in plan.offsets.values())
    assert all(off % 128 == 0 for _, off in plan.concat_parts.values())


def test_cuda_executor_builds_without_a_gpu():
    from tdsl.graph import models
    from tdsl.runtime import cuda
    if not cuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    exe = _build(models.mlp(batch=2, sizes=(16, 32, 8)), "cuda")
    assert len(exe.steps) == 3
    for k, _, _ in exe.steps:
        assert ".entry" in k.module.get_source("ptx")
    if tdsl.cuda(0).exist:
        pytest.skip("a GPU is here: the run is checked by the OpenCL tests' twins on CUDA")
    with pytest.raises(tdsl.TdslError, match="GPU that is not here"):
        exe.run(np.zeros((2, 16), np.float32))


class _FakeDriver:
    """cuda-bindings' driver API with host memory and no kernels: records what the CUDA
    executor asks of the driver, so its launch path (streams, bound launches, graph capture,
    copies) runs here without a GPU. Results are meaningless; the calls are the test."""

    class _Enum:
        def __getattr__(self, name):
            return type("V", (), {"value": 1})()

    CUdevice_attribute = CUstream_flags = CUstreamCaptureMode = _Enum()

    def __init__(self):
        self.calls, self.mem, self.capturing = [], {}, False

    def CUdeviceptr(self, p):
        return p

    def __getattr__(self, name):            # anything not modelled: succeed, return nothing
        def call(*args):
            self.calls.append(name)
            return (0, None)
        return call

    def cuMemAlloc(self, n):
        self.calls.append("cuMemAlloc")
        buf = np.zeros(n, np.uint8)
        self.mem[buf.ctypes.data] = buf
        return (0, buf.ctypes.data)

    def _copy(self, name, dst, src, n, *stream):
        import ctypes
        self.calls.append(name)
        ctypes.memmove(dst, src, n)
        return (0,)

    def cuMemcpyHtoDAsync(self, *a):
        return self._copy("cuMemcpyHtoDAsync", *a)

    def cuMemcpyDtoHAsync(self, *a):
        return self._copy("cuMemcpyDtoHAsync", *a)

    def cuMemcpyDtoDAsync(self, *a):
        return self._copy("cuMemcpyDtoDAsync", *a)

    def cuMemcpyHtoD(self, *a):
        return self._copy("cuMemcpyHtoD", *a)

    def cuLaunchKernel(self, *a):
        assert len(a) == 11 and a[10] == 0
        self.calls.append("cuLaunchKernel(captured)" if self.capturing else "cuLaunchKernel")
        return (0,)

    def cuStreamBeginCapture(self, stream, mode):
        self.capturing = True
        self.calls.append("cuStreamBeginCapture")
        return (0,)

    def cuStreamEndCapture(self, stream):
        self.capturing = False
        self.calls.append("cuStreamEndCapture")
        return (0, "graph")

    def cuEventElapsedTime(self, start, end):
        return (0, 1.0)

    def cuStreamCreate(self, flags):
        self.calls.append("cuStreamCreate")
        return (0, object())


def test_cuda_run_path_through_a_fake_driver(monkeypatch):
    from tdsl.graph import models
    from tdsl.runtime import cuda
    if not cuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    if tdsl.cuda(0).exist:
        pytest.skip("a real GPU is here")
    fake = _FakeDriver()
    dev = cuda._DriverDevice.__new__(cuda._DriverDevice)
    dev.d, dev.ctx, dev.name, dev.compute_capability = fake, None, "fake", (9, 0)
    dev._modules, dev.counts = {}, cuda.Counts()
    monkeypatch.setitem(cuda._devices, 0, dev)
    exe = _build(models.mlp(batch=2, sizes=(16, 32, 8)), "cuda")
    n_launches = sum(len(k.module.kernels) for k, _, _ in exe.steps)
    assert fake.calls.count("cuLaunchKernel(captured)") == n_launches
    assert "cuGraphInstantiate" in fake.calls and "cuLaunchKernel" not in fake.calls
    fake.calls.clear()
    x = _x((2, 16))
    out = exe.run(x)[0]
    assert out.shape == (2, 8)
    assert [c for c in fake.calls if c != "cuCtxSetCurrent"] == [
        "cuMemcpyHtoDAsync", "cuGraphLaunch", "cuMemcpyDtoHAsync", "cuStreamSynchronize"]
    fake.calls.clear()
    res = exe.run(tdsl.nd.array(x, tdsl.cuda(0)), output="device")
    assert isinstance(res[0], tdsl.nd.NDArray)
    assert "cuMemcpyDtoHAsync" not in fake.calls and fake.calls.count("cuMemcpyDtoDAsync") == 2
    exe.profile(number=1)
    assert set(exe.stats["cuda_graph"]) == {"launches_s", "graph_s", "saved_s"}
    assert "CUDA graph:" in exe.profile_text(number=1)
    monkeypatch.setenv("TDSL_CUDA_GRAPHS", "0")
    exe = _build(models.mlp(batch=2, sizes=(16, 32, 8)), "cuda")
    fake.calls.clear()
    exe.run(x)
    assert fake.calls.count("cuLaunchKernel") == n_launches and "cuGraphLaunch" not in fake.calls
    exe.profile(number=1)
