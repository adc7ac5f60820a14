"""The machine's fp32 multiply-add peak, measured with a kernel built by tdsl itself.

Each thread runs `chains` independent vector FMA chains `acc = acc * s + c` for `steps`
iterations, each chain started from its own input value (so no compiler can merge them); the chains are a
`local` cache with the chain and lane axes unrolled and vectorized, so they live in
registers. The vectors are the target's widest (zmm on AVX-512: the code generator asks LLVM
for 512-bit vectors even on CPUs where it would prefer 256), one thread per core on tdsl's
thread pool. The number of chains comes from the target: enough to cover FMA latency x
units, and no more than the register file holds beside the constants. tests/test_peak.py
checks it against a hand-written zmm FMA loop."""
from __future__ import annotations

import numpy as np

import tdsl
from tdsl.target import as_target


def definition(threads, chains, lanes, steps):
    k = tdsl.reduce_axis((0, steps), name="k")
    scale = tdsl.const(0.999, "float32")
    fma = tdsl.comm_reducer(lambda acc, c: acc * scale + c,
                            lambda dtype: tdsl.const(0, dtype), name="fma_chain")
    X = tdsl.placeholder((threads, chains, lanes), name="X")
    B = tdsl.placeholder((steps,), name="B")
    P = tdsl.compute((threads, chains, lanes),
                     lambda t, r, l: fma(B[k], axis=k, init=X[t, r, l]), name="P")
    return X, B, P


def schedule(target=None, steps=1 << 18):
    t = as_target(target)
    lanes = t.vector_lanes("float32")
    chains = min(t.vector_registers - 4, max(2 * t.fma_chains, 12))
    X, B, P = definition(t.num_cores, chains, lanes, steps)
    s = tdsl.create_schedule(P)
    PL = s.cache_write(P, "local")
    th, r, l = P.op.axis
    s[P].parallel(th)
    s[PL].compute_at(s[P], th)
    _, rl, ll = s[PL].op.axis
    (k,) = s[PL].op.reduce_axis
    s[PL].reorder(k, rl, ll)
    s[PL].unroll(rl)
    s[PL].vectorize(ll)
    flops = 2.0 * t.num_cores * chains * lanes * steps
    return s, [X, B, P], flops


def measure(target=None, repeat=40):
    """(GFLOP/s, chains per core) of the FMA probe on this machine for `target`: the best of
    `repeat` timings (~1.5 ms each, ~0.1 s in all), so load from elsewhere on a shared
    machine lowers it only if it lasts that long (10 timings once read half the peak)."""
    s, args, flops = schedule(target)
    f = tdsl.build(s, args, target=target or "llvm", name="fma_peak")
    rng = np.random.default_rng(0)
    x = rng.random([d.value for d in args[0].shape]).astype("float32")
    b = rng.random([d.value for d in args[1].shape]).astype("float32") * 1e-3
    p = np.empty_like(x)
    best = min(f.time_evaluator(number=3, repeat=repeat)(x, b, p).results)
    return flops / best / 1e9, x.shape[1]
