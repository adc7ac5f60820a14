"""Devices, device arrays, CUDA without a GPU, and the plain C target."""
import numpy as np
import pytest

import tdsl
from tdsl.codegen.source.cuda import CUDAPrinter
from tdsl.examples import gpu as G
from tdsl.examples import kernels as K
from tdsl.ir import expr as E
from tdsl.ir.expr import Range
from tdsl.runtime import cuda as rcuda


def test_devices():
    assert tdsl.cpu(0).exist
    assert repr(tdsl.cuda(0)) == "cuda(0)"
    assert isinstance(tdsl.cuda(0).exist, bool)       # never raises
    assert isinstance(tdsl.opencl(3).exist, bool)
    with pytest.raises(tdsl.TdslError):
        tdsl.nd.Device("tpu", 0)


def test_cpu_nd_array_roundtrip_and_llvm_call():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = tdsl.nd.array(x)
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.device == tdsl.cpu(0)
    np.testing.assert_array_equal(a.numpy(), x)
    A = tdsl.placeholder((3, 4), name="A")
    B = tdsl.compute((3, 4), lambda i, j: A[i, j] + 1.0, name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    b = tdsl.nd.empty((3, 4), "float32")
    f(a, b)
    np.testing.assert_array_equal(b.numpy(), x + 1)


@pytest.mark.skipif(tdsl.cuda(0).exist, reason="a CUDA GPU is present")
def test_cuda_without_gpu_builds_and_refuses_to_run():
    s, args = G.elementwise_schedule(256)
    f = tdsl.build(s, args, target="cuda")
    assert "__global__" in f.get_source()
    with pytest.raises(tdsl.TdslError, match=r"cuda\(0\) is not available.*get_source"):
        f(np.zeros(256, np.float32), np.zeros(256, np.float32))
    with pytest.raises(tdsl.TdslError, match="not available"):
        tdsl.nd.array(np.zeros(4, np.float32), tdsl.cuda(0))


def test_cuda_time_evaluator_on_gpu():
    if not tdsl.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    s, args = G.elementwise_schedule(1 << 16)
    f = tdsl.build(s, args, target="cuda")
    a = np.random.rand(1 << 16).astype(np.float32)
    A = tdsl.nd.array(a, tdsl.cuda(0))
    B = tdsl.nd.empty(a.shape, "float32", tdsl.cuda(0))
    r = f.time_evaluator(number=5, repeat=2)(A, B)
    assert r.mean > 0
    np.testing.assert_allclose(B.numpy(), a * 2 + 1)


def test_plain_c_target_matches_llvm():
    s, args = K.bias_relu_schedule(37, 50)
    f = tdsl.build(s, args, target="c", name="bias_relu")
    assert "int32_t tdsl_bias_relu(" in f.get_source()
    x = np.random.randn(37, 50).astype(np.float32)
    b = np.random.randn(50).astype(np.float32)
    y = np.zeros((37, 50), np.float32)
    f(x, b, y)
    np.testing.assert_allclose(y, K.bias_relu_reference(x, b), rtol=1e-6)
    s, args = K.softmax_schedule(9, 40)
    f = tdsl.build(s, args, target="c")
    x = np.random.randn(9, 40).astype(np.float32)
    y = np.zeros((9, 40), np.float32)
    f(x, y)
    np.testing.assert_allclose(y, K.softmax_reference(x), rtol=1e-5)


def test_c_target_floor_division_semantics():
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), dtype="int32", name="A")
    B = tdsl.compute((n,), lambda i: A[i] // 3 + A[i] % 5 + (i - 4) // 2, name="B")
    s = tdsl.create_schedule(B)
    f = tdsl.build(s, [A, B], target="c")
    a = np.arange(-20, 20, dtype=np.int32)
    b = np.zeros_like(a)
    f(a, b)
    i = np.arange(a.size)
    np.testing.assert_array_equal(b, a // 3 + a % 5 + (i - 4) // 2)
    assert "tdsl_floordiv_int32" in f.get_source()


def test_floor_division_printed_plain_only_when_nonnegative():
    i, j = E.Var("i"), E.Var("j")
    p = CUDAPrinter()
    p.begin()
    p.ranges = {i: Range(E.const(0), E.const(16))}
    assert p.expr(E.FloorDiv(i, E.const(4))) == "(i / 4)"
    assert p.expr(E.FloorMod(i, E.const(4))) == "(i % 4)"
    assert p.expr(E.FloorDiv(j, E.const(4))) == "tdsl_floordiv_int32(j, 4)"
    assert p.expr(E.FloorMod(i - 8, E.const(4))).startswith("tdsl_floormod_int32(")
    assert "tdsl_floormod_int32" in "".join(p.helpers.values())


def test_thread_bound_llvm_error_mentions_gpu_targets():
    s, args = G.elementwise_schedule(256)
    with pytest.raises(tdsl.BuildError):
        tdsl.build(s, args, target="llvm")


def test_cuda_include_dir_and_nvrtc_report():
    # informative: both return without raising on any machine
    rcuda.cuda_include_dir()
    assert isinstance(rcuda.have_nvrtc(), bool)


def test_nvrtc_leaves_interned_bytes_alone():
    """NVRTC writes its log and PTX into the buffers it is given; an immutable `b" " * 1`
    is the interpreter's shared b" ", which an empty log once overwrote with a NUL."""
    pytest.importorskip("cuda.bindings")
    from tdsl.runtime import cuda
    if not cuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    A = tdsl.placeholder((64,), name="A")
    B = tdsl.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, tdsl.thread_axis("blockIdx.x"))
    s[B].bind(tx, tdsl.thread_axis("threadIdx.x"))
    tdsl.build(s, [A, B], target="cuda").get_source("ptx")
    assert b" ".join([b"32", b"32"]) == b"32 32"
