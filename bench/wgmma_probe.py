"""A hand-written Hopper (sm_90a) bf16 GEMM on `wgmma.mma_async`, to learn on a lent H100/H200
what tdsl's generated kernels would have to reach: whether the shared-memory layouts and
matrix descriptors below are the ones the hardware reads (the output is checked against
torch), and how fast warpgroup MMAs run beside `torch.matmul` in the same process. It is a
probe of the platform, not a tdsl kernel: the facts it settles are what a tdsl `wgmma`
tensor intrinsic would be built on.

    python bench/wgmma_probe.py            # on a machine with an sm_90 GPU, cupy and torch
    python bench/wgmma_probe.py --ptx      # anywhere: NVRTC's PTX and ptxas -v per variant

The kernel: C (M x N, float32) = A (M x K, row-major) @ B (K x N, row-major), bf16 inputs.
A block computes BM x BN with two warpgroups (256 threads), each 64 x BN through
`wgmma.mma_async.m64nBNk16` (BN up to 256). Tiles of BK = 64 go through STAGES shared
buffers by cp.async; each is laid out in the 128-byte swizzle of the canonical wgmma
layouts:
- A, K-major: row m of the tile at m * 128 bytes, its 16-byte chunk c at (c ^ (m % 8)) * 16;
  descriptor: start + 32 bytes per k16 slice, stride byte offset (8 rows) 1024;
- B, MN-major (N contiguous, `imm-trans-b` = 1): 64-column blocks of 64 k-rows x 128 bytes
  (8 KiB), row k of a block at k * 128, chunk c at (c ^ (k % 8)) * 16; descriptor: start +
  16 rows (2048 bytes) per k16 slice, leading byte offset (next 64 columns) 8192, stride
  byte offset (next 8 k-rows) 1024.
The "inter" variants use the unswizzled canonical layouts instead, core matrices of 8 rows
x 16 bytes stored as 128 contiguous bytes: blocked layouts, the kind `transform_layout`
already makes, so the ones a first tdsl intrinsic could use.
Shared memory written by cp.async (the generic proxy) is fenced (`fence.proxy.async`)
before the warpgroup MMAs (the async proxy) read it. WAIT = 0 waits for each k tile's MMAs
before the next barrier; WAIT = 1 keeps one tile's MMAs in flight, the copies then running
STAGES - 2 tiles ahead instead of STAGES - 1."""
from __future__ import annotations

import argparse
import os
import sys

HEADER = r"""
#include <cuda_bf16.h>
typedef unsigned int u32;
typedef unsigned long long u64;

static __device__ __forceinline__ u32 smem_u32(const void *p) {
  return (u32)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void cp_async16(u32 dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
}
static __device__ __forceinline__ u64 smem_desc(u32 addr, u32 lbo, u32 sbo, u32 mode) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) |
         ((u64)(sbo >> 4) << 32) | ((u64)mode << 62);
}
"""


def wgmma_asm(bn):
    """The inline asm of one m64n{bn}k16 bf16 -> f32 MMA accumulating into d[0 .. bn/2)."""
    n = bn // 2
    regs = ", ".join(f"%{i}" for i in range(n))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n))
    return (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 2}, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16 {{{regs}}}, %{n}, %{n + 1}, '
            f'p, 1, 1, 0, 1;\\n}}\\n" : {outs} : "l"(da), "l"(db), "r"(scale_d));')


# where the 16-byte chunk c (8 elements along the contiguous axis) of row r (of an A tile,
# or k-row r of a 64-column block of B) goes, and the descriptors' (start offset per k16
# slice, leading byte offset, stride byte offset, mode) for A and for B
LAYOUTS = {
    "sw128": dict(a_chunk="row * 128 + ((c ^ (row & 7)) << 4)",
                  b_chunk="nb * 8192 + k * 128 + ((c ^ (k & 7)) << 4)",
                  a_desc=("s * 32", 16, 1024, 1), b_desc=("s * 2048", 8192, 1024, 1)),
    # core matrices of 8 rows x 16 bytes, 128 contiguous bytes each: A [BM/8][8][8][8]
    # (row group, k chunk, row, element); B [64/8][BN/8][8][8] (k group, n chunk, k, element)
    "inter": dict(a_chunk="((row >> 3) * 8 + c) * 128 + (row & 7) * 16",
                  b_chunk="((k >> 3) * (BN / 8) + cn) * 128 + (k & 7) * 16",
                  a_desc=("s * 256", 128, 1024, 0), b_desc=("s * 2 * (BN / 8) * 128",
                                                           "(BN / 8) * 128", 128, 0)),
}


def kernel_source(bm=128, bn=256, stages=3, wait=0, layout="sw128"):
    assert bm == 128 and bn in (64, 128, 256) and stages >= 2 and wait in (0, 1)
    assert stages >= 2 + wait
    lay = LAYOUTS[layout]
    (ao, albo, asbo, am), (bo, blbo, bsbo, bmode) = lay["a_desc"], lay["b_desc"]
    a_bytes, b_bytes = bm * 128, 64 * bn * 2
    ahead = stages - 1 - wait
    return HEADER + f"""
#define BM {bm}
#define BN {bn}
#define BK 64
#define STAGES {stages}
#define A_BYTES {a_bytes}
#define B_BYTES {b_bytes}
#define STAGE_BYTES (A_BYTES + B_BYTES)

static __device__ __forceinline__ void mma_k16(float *d, u64 da, u64 db, int scale_d) {{
  {wgmma_asm(bn)}
}}

static __device__ __forceinline__ void load_tile(u32 st, const __nv_bfloat16 *A,
    const __nv_bfloat16 *B, int K, int N, int m0, int n0, int k0, int tid) {{
  #pragma unroll
  for (int i = 0; i < BM * 8 / 256; ++i) {{          // A: BM rows of 8 16-byte chunks
    const int q = tid + i * 256, row = q >> 3, c = q & 7;
    cp_async16(st + {lay["a_chunk"]}, A + (size_t)(m0 + row) * K + k0 + c * 8);
  }}
  #pragma unroll
  for (int i = 0; i < 64 * (BN / 8) / 256; ++i) {{   // B: 64 k-rows of BN / 8 chunks
    const int q = tid + i * 256, k = q / (BN / 8), cn = q % (BN / 8), nb = cn >> 3, c = cn & 7;
    cp_async16(st + A_BYTES + {lay["b_chunk"]}, B + (size_t)(k0 + k) * N + n0 + cn * 8);
  }}
}}

extern "C" __global__ void __launch_bounds__(256) wgmma_gemm(const __nv_bfloat16 *__restrict__ A,
    const __nv_bfloat16 *__restrict__ B, float *__restrict__ C, int M, int N, int K) {{
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // the 128-byte swizzle is a function of the address bits: tiles start 1024-aligned
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float d[BN / 2];
  #pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
  const int KT = K / BK;
  #pragma unroll
  for (int s = 0; s < {ahead}; ++s) {{
    if (s < KT) load_tile(base + s * STAGE_BYTES, A, B, K, N, m0, n0, s * BK, tid);
    asm volatile("cp.async.commit_group;\\n" ::: "memory");
  }}
  for (int kt = 0; kt < KT; ++kt) {{
    asm volatile("cp.async.wait_group {ahead - 1};\\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
    __syncthreads();
    const int nk = kt + {ahead};
    if (nk < KT) load_tile(base + (nk % STAGES) * STAGE_BYTES, A, B, K, N, m0, n0, nk * BK, tid);
    asm volatile("cp.async.commit_group;\\n" ::: "memory");
    const u32 st = base + (kt % STAGES) * STAGE_BYTES;
    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
    #pragma unroll
    for (int s = 0; s < BK / 16; ++s) {{
      const u64 da = smem_desc(st + wg * 64 * 128 + {ao}, {albo}, {asbo}, {am});
      const u64 db = smem_desc(st + A_BYTES + {bo}, {blbo}, {bsbo}, {bmode});
      mma_k16(d, da, db, 1);
    }}
    asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned {wait};\\n" ::: "memory");
  }}
  asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
  const int g = lane >> 2, t = lane & 3;
  const int r0 = m0 + wg * 64 + warp * 16 + g;
  #pragma unroll
  for (int j = 0; j < BN / 8; ++j) {{
    const int col = n0 + j * 8 + 2 * t;
    *(float2 *)(C + (size_t)r0 * N + col) = make_float2(d[4 * j], d[4 * j + 1]);
    *(float2 *)(C + (size_t)(r0 + 8) * N + col) = make_float2(d[4 * j + 2], d[4 * j + 3]);
  }}
}}
"""


def smem_bytes(bm, bn, stages):
    return stages * (bm * 128 + 64 * bn * 2) + 1024


# (BM, BN, stages, wait, layout)
VARIANTS = [(128, 256, 3, 0, "sw128"), (128, 256, 4, 1, "sw128"), (128, 128, 4, 0, "sw128"),
            (128, 128, 5, 1, "sw128"), (128, 256, 3, 0, "inter"), (128, 128, 4, 0, "inter")]


def compile_report(v):
    """(wgmma instructions in the PTX, ptxas's figures for the kernel) of variant `v`,
    through NVRTC (no GPU needed)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from tdsl.codegen.ptxas import parse
    from tdsl.runtime.cuda import nvrtc_compile
    src = kernel_source(*v)
    ptx, _ = nvrtc_compile(src, "compute_90a")
    _, log = nvrtc_compile(src, "sm_90a", ["--ptxas-options=-v"])
    return ptx.count("wgmma.mma_async"), parse(log)["wgmma_gemm"]


def ptx_report():
    for v in VARIANTS:
        n, r = compile_report(v)
        print(f"BM x BN {v[0]} x {v[1]}, {v[2]} stages, wait {v[3]}, {v[4]}: "
              f"{n} wgmma in the PTX, "
              f"{r['registers']} registers, {r['spill_store_bytes']} bytes spilled, "
              f"{smem_bytes(*v[:3])} bytes of shared memory")


def run_on_gpu(n):
    import cupy as cp
    import torch
    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    ref = a.float() @ b.float()
    ca, cb = cp.asarray(a.view(torch.int16)), cp.asarray(b.view(torch.int16))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn, reps=20):
        fn()
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop) / reps * 1e-3

    flop = 2.0 * n ** 3
    t_torch = timed(lambda: a @ b)
    print(f"torch.matmul bf16 {n}: {flop / t_torch / 1e12:.0f} TFLOP/s")
    for v in VARIANTS:
        bm, bn, stages, wait, layout = v
        try:
            mod = cp.RawModule(code=kernel_source(*v), options=("-arch=sm_90a", "--std=c++17"),
                               name_expressions=None)
            k = mod.get_function("wgmma_gemm")
            shm = smem_bytes(bm, bn, stages)
            k.max_dynamic_shared_size_bytes = shm
            c = cp.zeros((n, n), cp.float32)
            args = (ca, cb, c, cp.int32(n), cp.int32(n), cp.int32(n))

            def launch():
                k((n // bn, n // bm), (256,), args, shared_mem=shm)
            launch()
            cp.cuda.Device().synchronize()
            got = torch.as_tensor(c, device="cuda")
            err = ((got - ref).abs().max() / ref.abs().max()).item()
            t = timed(launch)
            print(f"wgmma {bm}x{bn} {layout} stages {stages} wait {wait}: rel err {err:.1e}, "
                  f"{flop / t / 1e12:.0f} TFLOP/s, {t_torch / t:.2f}x torch")
        except Exception as e:   # one variant failing leaves the others' rows
            print(f"wgmma {bm}x{bn} {layout} stages {stages} wait {wait}: FAILED "
                  f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptx", action="store_true", help="compile only: PTX and ptxas -v")
    ap.add_argument("--n", type=int, default=4096)
    opts = ap.parse_args()
    if opts.ptx:
        ptx_report()
    else:
        run_on_gpu(opts.n)


if __name__ == "__main__":
    main()
