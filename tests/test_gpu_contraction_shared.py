"""The GPU contraction rule's shared-memory slices (tdsl/autosched/gpu_contraction.py) fit
the target's limit at every size a symbolic extent allows. The rule sizes them from its
estimate of what a block stages (`shared_bytes`): that estimate must cover what lowering
allocates, strides and dilations included (a stride-2 conv's input slice is twice its
output tile wide; read as stride 1, conv1d_net with a symbolic batch and signal length
asked OpenCL for 57 KB of 48), and what the rule keeps must be within
`Target.shared_memory_bytes`, whatever that is. The convs run on OpenCL (PoCL on the CPU)
against numpy at ragged lengths, and the network against onnxruntime."""
import os
import sys

import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl import target as tt
from tdsl.autosched import AutoParams, Explanation
from tdsl.autosched import gpu_contraction as gc
from tdsl.autosched.analysis import StageInfo
from tdsl.graph import models
from tdsl.runtime import cuda as rcuda

# (in channels, out channels, taps, stride, dilation)
CONVS = {
    "conv1d_net_stage": (32, 64, 3, 2, 1),      # the kernel that asked for 57 KB
    "stem_stride4": (1, 32, 11, 4, 1),
    "dilated": (64, 128, 3, 1, 2),
    "1x1_stride2": (32, 64, 1, 2, 1),
    "wide_kernel": (4, 64, 255, 1, 1),          # one step of the weights alone is 65 KB
}


def _conv1d(cin, cout, k, stride, dil):
    """A 1-D conv as the graph writes one (NCHW, a single row) over an input already padded,
    of symbolic batch and length: (X, W, Y)."""
    batch, length = tdsl.size_var("batch"), tdsl.size_var("length")
    X = tdsl.placeholder((batch, cin, 1, length), name="x")
    W = tdsl.placeholder((cout, cin, 1, k), name="w")
    rc, ry, rx = (tdsl.reduce_axis((0, cin), name="rc"), tdsl.reduce_axis((0, 1), name="ry"),
                  tdsl.reduce_axis((0, k), name="rx"))
    Y = tdsl.compute((batch, cout, 1, (length - dil * (k - 1) - 1) // stride + 1),
                     lambda b, f, y, x: tdsl.sum(X[b, rc, y + ry, x * stride + rx * dil] * W[f, rc, ry, rx],
                                                 axis=[rc, ry, rx]), name="y")
    return X, W, Y


def _scheduled(case, target):
    """(schedule, args, the rule's estimate of its shared bytes) of conv `case` tiled for
    `target` by the contraction rule."""
    X, W, Y = _conv1d(*CONVS[case])
    s = tdsl.create_schedule(Y.op)
    info, params = StageInfo(Y.op), AutoParams.of(None)
    r, v = info.row_axis(), len(info.axes) - 1
    ty, tx, ti, tj, kt, dbl, _ = gc.sizes(info, r, v, target, params)
    assert gc.split_parts(info, gc.grid_blocks(info, r, v, ty * ti, tx * tj), target) == 1
    gc.contraction(s, s[Y], info, target, params, Explanation(target))
    return s, [X, W, Y], gc.shared_bytes(info, r, v, ty * ti, tx * tj, kt, dbl)


def _staged_bytes(kernel):
    """What a kernel's shared buffers hold, in bytes (without the layout's alignment)."""
    total = 0
    for b in kernel.shared:
        assert b.dtype == "float32", b
        total += 4 * int(np.prod([int(getattr(d, "value", d)) for d in b.shape]))
    return total


@pytest.mark.parametrize("kind", ["opencl", "cuda"])
@pytest.mark.parametrize("case", list(CONVS))
def test_shared_slices_are_within_the_estimate_and_the_targets_limit(case, kind):
    target = tt.Target(kind)
    s, args, estimate = _scheduled(case, target)
    (kernel,) = tdsl.lower(s, args, target=kind).attrs["kernels"]
    staged = _staged_bytes(kernel)
    assert 0 < staged <= estimate <= target.shared_memory_bytes, (staged, estimate)
    assert kernel.shared_bytes <= target.shared_memory_bytes
    assert kernel.dynamic_shared_bytes == 0


@pytest.fixture
def small_shared_kind():
    """A GPU kind whose blocks get 12 KiB of shared memory."""
    facts = tt.GENERIC_GPU_FACTS._replace(shared_memory_bytes=12 * 1024)
    tt.register_kind(tt.TargetKind("small-shared", "gpu", gpu_facts=lambda t: facts))
    yield tt.Target("small-shared")
    tt.unregister_kind("small-shared")


@pytest.mark.parametrize("case", list(CONVS))
def test_tiles_follow_the_limit_the_target_gives(case, small_shared_kind):
    s, args, estimate = _scheduled(case, small_shared_kind)
    (kernel,) = tdsl.lower(s, args, target="opencl").attrs["kernels"]
    assert _staged_bytes(kernel) <= estimate <= 12 * 1024


@pytest.mark.parametrize("case,params", [
    ((1, 1, 16384, 1, 1), None),        # one output's slices of one step: 64 KiB each
    (CONVS["wide_kernel"], AutoParams(block=(16, 16), thread_tile=(8, 4))),   # kept as given
])
def test_a_kernel_that_cannot_fit_is_named(case, params):
    """Slices too large for the target even at one reduction step, where the rule may not
    shrink the tiles further (one output left, or sizes a tuner gave): the build names the
    kernel, before any OpenCL compiler sees it."""
    X, W, Y = _conv1d(*case)
    s = tdsl.create_schedule(Y.op)
    target = tt.Target("opencl")
    gc.contraction(s, s[Y], StageInfo(Y.op), target, AutoParams.of(params), Explanation(target))
    with pytest.raises(tdsl.BuildError, match=r"kernel wide_kernel\w*: shared memory of \d+ bytes"):
        tdsl.build(s, [X, W, Y], target="opencl", name="wide")


def _reference(x, w, stride, dil):
    k, ol = w.shape[-1], (x.shape[-1] - dil * (w.shape[-1] - 1) - 1) // stride + 1
    taps = np.arange(ol)[:, None] * stride + np.arange(k)[None, :] * dil
    return np.einsum("ncok,fck->nfo", x[:, :, 0, taps], w[:, :, 0])[:, :, None, :]


needs_opencl = pytest.mark.skipif(not tdsl.opencl(0).exist, reason="no usable OpenCL device")


@needs_opencl
@pytest.mark.parametrize("case", list(CONVS))
def test_conv_matches_numpy_on_opencl_at_ragged_lengths(case):
    cin, cout, k, stride, dil = CONVS[case]
    s, args, _ = _scheduled(case, tt.Target("opencl"))
    f = tdsl.build(s, args, target="opencl", name="conv")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((cout, cin, 1, k)).astype(np.float32)
    span = dil * (k - 1) + 1
    for batch, length in [(1, span), (2, span + 37), (1, span + 1000)]:
        x = rng.standard_normal((batch, cin, 1, length)).astype(np.float32)
        want = _reference(x, w, stride, dil)
        y = np.zeros(want.shape, np.float32)
        f(x, w, y)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.skipif(not rcuda.have_nvrtc(), reason="NVRTC is not installed")
def test_cuda_conv_compiles_within_static_shared_memory():
    """The kernel that took 57 KB (CUDA launched it with dynamic shared memory) compiles
    with NVRTC within what a block may declare statically."""
    target = tt.Target("cuda")
    s, args, _ = _scheduled("conv1d_net_stage", target)
    mod = tdsl.build(s, args, target="cuda", name="stage")
    (k,) = mod.kernels
    assert 0 < k.shared_bytes <= target.shared_memory_bytes and k.dynamic_shared_bytes == 0
    assert ".entry" in mod.get_source("ptx")


@needs_opencl
def test_conv1d_net_with_a_symbolic_batch_and_length_on_opencl():
    """bench/dynamic.py's conv1d_net, built once for OpenCL, right at lengths that leave
    every layer ragged (64 samples: one output in the last stage) and at batch 2."""
    pytest.importorskip("onnxruntime")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    from dynamic import symbolic_axes
    m = symbolic_axes(models.conv1d_net(), {0: "batch", 2: "signal"})
    exe = G.build(G.optimize(G.from_onnx(m), target="opencl"), target="opencl")
    limit = tt.Target("opencl").shared_memory_bytes
    assert all(k.shared_bytes <= limit for step, _, _ in exe.steps for k in step.module.kernels)
    rng = np.random.default_rng(5)
    for shape in [(1, 1, 1000), (2, 1, 1337), (1, 1, 203), (1, 1, 64)]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = models.onnxruntime_run(m, {"input": x})[0]
        np.testing.assert_allclose(exe.run(x)[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
