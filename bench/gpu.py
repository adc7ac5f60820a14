"""SGEMM 4096 on a CUDA GPU: tdsl's shared-memory schedule against torch.matmul.

    python bench/gpu.py [--size 4096] [--number 10]

Prints GFLOP/s for both in the same run (and the ratio), or "no GPU" when there is no CUDA
GPU (building still checks that the CUDA source compiles through NVRTC).
"""
import argparse
import sys
import time

import numpy as np

import tdsl
from tdsl.examples import gpu as G


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--number", type=int, default=10)
    opt = ap.parse_args(argv)
    n = opt.size
    t0 = time.perf_counter()
    s, args = G.matmul_fast_schedule(n, n, n)
    f = tdsl.build(s, args, target="cuda", name="sgemm")
    print(f"tdsl build (lower + CUDA C + NVRTC): {time.perf_counter() - t0:.2f} s")
    if not tdsl.cuda(0).exist:
        print("no GPU: the CUDA source compiled, nothing to time")
        return 0
    dev = tdsl.cuda(0)
    print(f"device: {dev.name}")
    a = np.random.rand(n, n).astype(np.float32)
    b = np.random.rand(n, n).astype(np.float32)
    A, B = tdsl.nd.array(a, dev), tdsl.nd.array(b, dev)
    C = tdsl.nd.empty((n, n), "float32", dev)
    flops = 2.0 * n ** 3
    r = f.time_evaluator(number=opt.number, repeat=3)(A, B, C)
    c = C.numpy()
    i = np.random.randint(0, n, 64)
    j = np.random.randint(0, n, 64)
    ref = np.einsum("ik,ki->i", a[i].astype(np.float64), b[:, j].astype(np.float64))
    err = float(np.max(np.abs(c[i, j] - ref) / np.abs(ref)))
    tdsl_gf = flops / r.min / 1e9
    print(f"tdsl  sgemm {n}: {tdsl_gf:9.1f} GFLOP/s  ({r.min * 1e3:.3f} ms, rel. err {err:.1e})")
    try:
        import torch
    except ImportError:
        print("torch is not installed: no reference")
        return 0
    if not torch.cuda.is_available():
        print("torch has no CUDA: no reference")
        return 0
    ta = torch.from_numpy(a).cuda()
    tb = torch.from_numpy(b).cuda()
    torch.backends.cuda.matmul.allow_tf32 = False
    for _ in range(3):
        torch.matmul(ta, tb)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        for _ in range(opt.number):
            torch.matmul(ta, tb)
        en.record()
        en.synchronize()
        best = min(best, st.elapsed_time(en) * 1e-3 / opt.number)
    torch_gf = flops / best / 1e9
    print(f"torch matmul {n}: {torch_gf:9.1f} GFLOP/s  ({best * 1e3:.3f} ms)")
    print(f"tdsl / torch: {tdsl_gf / torch_gf:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
