"""The LLVM backend on a hand-built register-tiled GEMM (no schedule layer involved).

    python bench/llvm_microkernel.py [--asm]

C (1024x1024) = A @ B with an 8x32 C tile in a local buffer indexed only by unrolled and
vectorized constants (SROA turns it into 16 zmm accumulators), k innermost, `<16 x float>`
FMAs, rows parallel. Prints codegen and compile times, GFLOP/s on 1 and all threads, and
checks the inner loop is FMA on zmm registers with no spills; `--asm` prints the loop.
"""
from __future__ import annotations

import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tdsl.codegen import llvm as L  # noqa: E402
from tdsl.ir import expr as E  # noqa: E402
from tdsl.ir.expr import BufferLoad as Ld, IntImm as I  # noqa: E402
from tdsl.ir.stmt import (Allocate, Buffer, BufferStore as St, For, ForKind as K,  # noqa: E402
                          PrimFunc, seq)
from tdsl.runtime import cpu  # noqa: E402


def gemm_microkernel(M=1024, N=1024, Kd=1024, MR=8, NV=2):
    NR = NV * 16
    A = Buffer("A", (I(M), I(Kd)), "float32")
    B = Buffer("B", (I(Kd), I(N)), "float32")
    C = Buffer("C", (I(M), I(N)), "float32")
    Cl = Buffer("Cl", (I(MR * NR),), "float32", "local")
    io, jo, ii, ji, jv, k = (E.Var(s) for s in ("io", "jo", "ii", "ji", "jv", "k"))
    cidx = ii * NR + ji * 16 + jv

    def tile(body):
        return For(ii, I(0), I(MR), K.UNROLLED,
                   For(ji, I(0), I(NV), K.UNROLLED, For(jv, I(0), I(16), K.VECTORIZED, body)))
    init = tile(St(Cl, E.const(0.0, "float32"), (cidx,)))
    update = For(k, I(0), I(Kd), K.SERIAL, tile(St(
        Cl, Ld(Cl, (cidx,)) + Ld(A, ((io * MR + ii) * Kd + k,)) * Ld(B, (k * N + jo * NR + ji * 16 + jv,)),
        (cidx,))))
    out = tile(St(C, Ld(Cl, (cidx,)), ((io * MR + ii) * N + jo * NR + ji * 16 + jv,)))
    body = For(io, I(0), I(M // MR), K.PARALLEL,
               For(jo, I(0), I(N // NR), K.SERIAL, Allocate(Cl, seq(init, update, out))))
    return PrimFunc("gemm_mk", [A, B, C], body, {"num_user_args": 3})


def main():
    X = Buffer("X", (I(1),), "float32")
    L.build(PrimFunc("warm", [X], St(X, E.const(0.0, "float32"), (I(0),)), {}))  # LLVM init
    cpu.clear_cache()
    f = gemm_microkernel()
    t0 = time.perf_counter()
    L.codegen(f)
    t1 = time.perf_counter()
    m = L.build(f)
    t2 = time.perf_counter()
    L.build(gemm_microkernel())
    t3 = time.perf_counter()
    print(f"codegen {1e3 * (t1 - t0):.1f} ms, build (codegen + O3 + JIT) {1e3 * (t2 - t1):.1f} ms, "
          f"cached rebuild {1e3 * (t3 - t2):.1f} ms")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 1024)).astype("float32")
    b = rng.standard_normal((1024, 1024)).astype("float32")
    c = np.zeros((1024, 1024), "float32")
    m(a, b, c)
    assert np.allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    flops = 2 * 1024 ** 3
    for nt in sorted({1, m.get_num_threads()}):
        m.set_num_threads(nt)
        r = m.time_evaluator(number=3, repeat=5)(a, b, c)
        print(f"threads={nt}: {flops / r.min / 1e9:.1f} GFLOP/s")
    t = time.perf_counter()
    for _ in range(3):
        a @ b
    print(f"numpy: {3 * flops / (time.perf_counter() - t) / 1e9:.1f} GFLOP/s")
    asm = m.get_source("asm")
    loops = [blk for blk in re.split(r"\n(?=\.LBB)", asm) if blk.count("vfmadd231ps") >= 16]
    loop = loops[0] if loops else ""
    fmas = loop.count("vfmadd231ps")
    spills = len(re.findall(r"vmovups\s+%zmm\d+, -?\d*\(%rsp\)", loop))
    print(f"inner loop: {fmas} zmm FMAs, {spills} spills")
    if "--asm" in sys.argv:
        print(loop)


if __name__ == "__main__":
    main()
