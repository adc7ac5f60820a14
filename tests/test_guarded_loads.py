"""A load under if_then_else is evaluated only where its condition holds, also when the
loop around it is vectorized (issue: a float4 load of the row before A, hoisted above the
condition, was CUDA_ERROR_ILLEGAL_ADDRESS on a real GPU)."""
import re

import numpy as np
import pytest

import tdsl
from tdsl.runtime.ndarray import opencl


def padded_rows(width, lanes_condition=False):
    A = tdsl.placeholder((4, width), name="A")
    if lanes_condition:     # a condition that differs from lane to lane
        cond = lambda y, x: tdsl.all(y >= 1, y <= 4, x % 2 == 0)  # noqa: E731
    else:
        cond = lambda y, x: tdsl.all(y >= 1, y <= 4)  # noqa: E731
    B = tdsl.compute((6, width), lambda y, x: tdsl.if_then_else(
        cond(y, x), A[y - 1, x], tdsl.const(0, "float32")), name="B")
    s = tdsl.create_schedule(B)
    xo, xi = s[B].split(B.op.axis[1], factor=4)
    bx, tx = s[B].split(xo, factor=64)
    s[B].bind(bx, tdsl.thread_axis("blockIdx.x"))
    s[B].bind(tx, tdsl.thread_axis("threadIdx.x"))
    s[B].reorder(bx, tx, B.op.axis[0], xi)
    s[B].vectorize(xi)
    return s, A, B


def reads_of_A(source):
    """Each statement of the kernel that reads A, with the text before the read."""
    body = source[source.index("main_kernel"):]
    out = []
    for stmt in body.split(";"):
        for m in re.finditer(r"\bA\s*(\+|\[)", stmt):
            out.append(stmt[:m.start()])
    return out


@pytest.mark.parametrize("target", ["cuda", "opencl", "c"])
@pytest.mark.parametrize("lanes_condition", [False, True])
def test_no_load_of_A_before_its_condition(target, lanes_condition):
    s, A, B = padded_rows(1 << 20, lanes_condition)
    src = tdsl.build(s, [A, B], target=target).get_source()
    reads = reads_of_A(src)
    assert reads
    for before in reads:
        # every read of A is the chosen side of a `?:` whose condition tests the row
        assert "?" in before and re.search(r"\(0 < y\)", before), before


def test_cuda_source_compiles():
    pytest.importorskip("cuda.bindings")
    s, A, B = padded_rows(1 << 12)
    try:
        ptx = tdsl.build(s, [A, B], target="cuda").get_source("ptx")
    except tdsl.BuildError as e:
        pytest.skip(f"NVRTC not available: {e}")
    assert ".entry" in ptx


@pytest.mark.parametrize("target", ["c"] + (["opencl"] if opencl(0).exist else []))
@pytest.mark.parametrize("lanes_condition", [False, True])
def test_padded_rows_match_numpy(target, lanes_condition):
    s, A, B = padded_rows(1024, lanes_condition)
    f = tdsl.build(s, [A, B], target=target)
    a = np.random.default_rng(1).standard_normal((4, 1024)).astype("f")
    b = np.empty((6, 1024), "f")
    f(a, b)
    ref = np.pad(a, ((1, 1), (0, 0)))
    if lanes_condition:
        ref[:, 1::2] = 0
    np.testing.assert_array_equal(b, ref)
