"""Stage.storage_swizzle(width): a shared buffer laid out with the XOR pattern of NVIDIA's
32/64/128-byte swizzles (16-byte chunk c of 128-byte row r stored at c ^ (r % (width / 16))),
1024-byte aligned; every access is mapped, a 16-byte copy stays one move."""
import numpy as np
import pytest

import tdsl
from tdsl.codegen.source.cuda import CUDAPrinter
from tdsl.ir import stmt as S

M, K = 64, 128


def copy_through_shared(width=128, dtype="float16"):
    A = tdsl.placeholder((M, K), dtype=dtype, name="A")
    B = tdsl.compute((M, K), lambda i, j: A[i, j].astype("float32") * 2.0, name="B")
    s = tdsl.create_schedule(B)
    AS = s.cache_read(A, "shared", [B])
    i, j = B.op.axis
    bi, ii = s[B].split(i, 16)
    s[B].bind(bi, tdsl.thread_axis("blockIdx.x"))
    s[B].bind(ii, tdsl.thread_axis("threadIdx.y"))
    _, xi = s[B].split(j, 4)
    s[B].bind(xi, tdsl.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], bi)
    if width:
        s[AS].storage_swizzle(width)
    per = 16 // (2 if dtype == "float16" else 4)       # elements in a 16-byte move
    ax = s[AS].fuse(*s[AS].op.axis)
    rest, vec = s[AS].split(ax, per)
    s[AS].vectorize(vec)
    _, tx = s[AS].split(rest, 4)
    s[AS].bind(tx, tdsl.thread_axis("threadIdx.x"))
    return s, [A, B]


@pytest.mark.parametrize("width", [32, 64, 128])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_values_unchanged_and_copies_stay_16_byte_moves(width, dtype):
    s, args = copy_through_shared(width, dtype)
    a = np.random.default_rng(width).standard_normal((M, K)).astype(dtype)
    b = np.zeros((M, K), np.float32)
    tdsl.build(s, args, target="c")(a, b)
    np.testing.assert_allclose(b, a.astype(np.float32) * 2, rtol=1e-6)
    src = tdsl.build(s, args, target="cuda").get_source()
    assert "__shared__ __align__(1024)" in src
    copies = [ln for ln in src.splitlines() if "tdsl_cp_async16(A_shared" in ln]
    assert copies and all(" ^ " in ln for ln in copies), src


def test_the_mapping_is_the_hardware_pattern():
    """In bytes: b -> b ^ (((b >> 7) % (width / 16)) << 4) (CUTLASS's Swizzle<B, 4, 3>),
    a permutation of the 16-byte chunks of each 128-byte row."""
    p = CUDAPrinter()
    for dtype, esize in (("float16", 2), ("float32", 4), ("int8", 1)):
        for width in (32, 64, 128):
            buf = S.Buffer("X", (4096,), dtype, "shared", swizzle=width)
            text = p.offset_text(buf, "f")
            got = [eval(text, {"f": f}) for f in range(4096 // esize)]   # C and Python agree
            want = [(b ^ (((b >> 7) % (width // 16)) << 4)) // esize
                    for b in (f * esize for f in range(4096 // esize))]
            assert got == want, (dtype, width)
            assert sorted(got) == list(range(4096 // esize))


def test_wrong_uses_are_errors():
    s, args = copy_through_shared(0)
    AS = s.stages[[st.name for st in s.stages].index("A.shared")]
    with pytest.raises(tdsl.ScheduleError, match="width must be 32, 64 or 128"):
        AS.storage_swizzle(48)
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.compute((M, K), lambda i, j: A[i, j] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    AL = s.cache_read(A, "global", [B])
    s[AL].storage_swizzle(128)
    with pytest.raises(tdsl.ScheduleError, match="scope 'global'"):
        tdsl.lower(s, [A, B])


def test_the_mma_fragments_refuse_a_swizzled_tile():
    """ldmatrix reads plain rows: a swizzled A tile under mma.sync is an error, not a
    wrong answer."""
    from tdsl.examples import mma_gemm
    s, args = mma_gemm.schedule(64, 64, 64, warps=(2, 2), warp_tiles=(1, 2), k_step=16)
    shared = [st for st in s.stages if st.scope == "shared"]
    shared[0].storage_swizzle(128)
    with pytest.raises(tdsl.ScheduleError, match="storage_swizzle"):
        tdsl.build(s, args, target="c")
