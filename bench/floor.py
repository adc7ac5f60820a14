"""The machine's latency floor: the p99/p50 of work that no runtime can do with less spread,
timed exactly as bench/latency.py's `percentiles` times a network's calls.

    python bench/floor.py 1.7 5 20          # calls of these medians, in ms
    python bench/floor.py --calls 300 1.7
    python bench/floor.py --kinds alu 0.3   # the scalar chain alone (default: alu,fma)

Two callables per duration, each a fixed number of iterations of a register-only loop
(a multiply-add chain: no loads or stores, so no cache, page fault or memory bandwidth can
vary it; only the core's clock, a lost core, an interrupt or the hypervisor can):
- `one`: the caller spins it alone;
- `two`: the caller and one worker thread each spin it, the caller then waits for the
  worker: the shape of a parallel call on two threads. The worker spins on a flag between
  calls (the fastest hand-off there is) and exits after IDLE_MS without one, so that during
  the pauses between runs it holds no core; the first call after a pause, kept apart by
  `percentiles`, starts it again.
The loop is a scalar multiply-add chain ("alu"), which a core shared with another thread
on the host hardly slows, or ("fma") 8 chains of 16-lane FMAs that keep the FMA units busy
as a compute-bound kernel does; bench/zoo.py uses the scalar one.
If the floor's own p99/p50 is above 1.2 at a network's median, no runtime can keep that
network's p99 within 1.2x of its p50 on this machine; if the floor is tight and a runtime
is not, the gap is the runtime's. bench/zoo.py prints it beside every model.

`two` waits for its worker, as a parallel call whose threads each own half the work must:
where other processes keep a core busy, its worker is often queued and its p50 grows many
times (0.5 ms of work took 7.8 ms at the median on a shared 2-vCPU VM), while a runtime
whose caller takes a late worker's tasks (tdsl's pool) runs those calls alone, at about
`one`'s time. Then `one` is the floor to read, `two` the cost of a strict join.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tdsl.runtime import ccompiler  # noqa: E402
from latency import percentiles  # noqa: E402

IDLE_MS = 100     # far above the gap between two calls of a run, far below the 0.3 s pause

SOURCE = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define relax() __builtin_ia32_pause()
#else
#define relax() ((void)0)
#endif

#ifdef FLOOR_FMA
/* 8 independent chains of 16-lane float FMAs in vector registers: the FMA units busy, as
 * a compute-bound kernel keeps them (a core shared with another thread on the host, or a
 * lower clock under wide vectors, shows here and not in the scalar chain), no memory */
typedef float v16 __attribute__((vector_size(64)));
#define FMA8(a0, a1, a2, a3, a4, a5, a6, a7)                                        \
  a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;                \
  a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;                \
  __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5),  \
                   "+v"(a6), "+v"(a7))
static uint64_t spin(int64_t n, uint64_t x) {
  v16 m, c;
  for (int l = 0; l < 16; l++) { m[l] = 0.5f; c[l] = 1.0f; }
  v16 a0 = c * (float)(x & 7), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int64_t i = 0; i < n; i++) { FMA8(a0, a1, a2, a3, a4, a5, a6, a7); }
  return (uint64_t)(a0[0] + a1[1] + a2[2] + a3[3] + a4[4] + a5[5] + a6[6] + a7[7]);
}
#else
/* a dependent multiply-add chain held in a register: ~4 cycles an iteration, no memory */
static uint64_t spin(int64_t n, uint64_t x) {
  for (int64_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ volatile("" : "+r"(x));
  }
  return x;
}
#endif

uint64_t floor_one(int64_t n) { return spin(n, (uint64_t)n); }

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* state: 0 the worker waits, 1 a call is posted, 2 no worker (it timed out) */
static _Atomic int state = 2;
static _Atomic int64_t done;
static int64_t work, idle_ns;
static volatile uint64_t sink;

static void *worker(void *arg) {
  (void)arg;
  for (;;) {
    int64_t t0 = now_ns();
    int expect = 0;
    while (atomic_load_explicit(&state, memory_order_acquire) == 0) {
      relax();
      if (now_ns() - t0 > idle_ns && atomic_compare_exchange_strong(&state, &expect, 2))
        return 0;
      expect = 0;
    }
    sink = spin(work, (uint64_t)work);
    atomic_store_explicit(&state, 0, memory_order_release);
    atomic_fetch_add_explicit(&done, 1, memory_order_release);
  }
}

uint64_t floor_two(int64_t n, int64_t idle) {
  work = n;
  idle_ns = idle;
  int64_t before = atomic_load(&done);
  int expect = 0;
  if (!atomic_compare_exchange_strong(&state, &expect, 1)) {   /* no worker: start one */
    atomic_store(&state, 1);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, worker, 0) != 0) { atomic_store(&state, 2); return 0; }
    pthread_attr_destroy(&a);
  }
  uint64_t x = spin(n, (uint64_t)n + 1);
  while (atomic_load_explicit(&done, memory_order_acquire) == before) relax();
  return x;
}
"""

_libs = {}
KINDS = {"alu": [], "fma": ["-march=native", "-DFLOOR_FMA"]}


def _load(kind="alu"):
    """The floor's library of loop `kind`: "alu", the scalar chain, or "fma", vector FMAs."""
    if kind not in _libs:
        so = ccompiler.shared_object({"floor.c": SOURCE}, ["-O2", "-pthread", *KINDS[kind]],
                                     "bench/floor.py")
        with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
            f.write(so)
        lib = ctypes.CDLL(f.name)            # ctypes releases the GIL around each call
        os.unlink(f.name)
        for fn in (lib.floor_one, lib.floor_two):
            fn.restype = ctypes.c_uint64
        lib.floor_one.argtypes = [ctypes.c_int64]
        lib.floor_two.argtypes = [ctypes.c_int64, ctypes.c_int64]
        _libs[kind] = lib
    return _libs[kind]


def _iterations(fn, seconds, calls=15):
    """Iterations of `fn`'s loop that take `seconds` on a CPU: its rate is read from the
    thread's CPU clock (the fastest of `calls`), which a preemption does not stretch, so
    that another process taking the core while it is calibrated makes it no shorter."""
    n = 200_000
    fn(n)
    best = float("inf")
    for _ in range(calls):
        t0 = time.thread_time_ns()
        fn(n)
        best = min(best, (time.thread_time_ns() - t0) * 1e-9)
    return max(1, int(n * seconds / max(best, 1e-9)))


def callables(seconds, kind="alu"):
    """(`one`, `two`): the floor's callables of about `seconds` median each, calibrated now
    on one thread; `two` gives each of its threads that work (calibrated on two threads, a
    worker queued behind another process would make it smaller, the floor optimistic)."""
    lib = _load(kind)
    n = _iterations(lib.floor_one, seconds)
    idle = IDLE_MS * 1_000_000
    return (lambda: lib.floor_one(n)), (lambda: lib.floor_two(n, idle))


def run_median(fn, run=25, pause_s=0.3, runs=3):
    """The median seconds of `fn`'s calls in a run as `percentiles` takes them (a pause, a
    first call kept apart, `run` calls), the least of `runs` runs (a run in which another
    process took a core is slower): what the floor is calibrated to. A best block's mean,
    after a warm-up of its own, can be half of it on a small network."""
    medians = []
    for _ in range(runs):
        time.sleep(pause_s)
        fn()
        ts = []
        for _ in range(run):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        medians.append(float(np.median(ts)))
    return min(medians)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ms", nargs="+", type=float, help="median call durations, ms")
    ap.add_argument("--calls", type=int, default=100, help="calls per side (bench/latency.py)")
    ap.add_argument("--kinds", default="alu,fma", help="loops: alu (scalar chain), fma (vector FMAs)")
    a = ap.parse_args(argv)
    kinds = a.kinds.split(",")
    print(f"{'median ms':>9s} {'side':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99/p50':>7s} "
          f"{'kept':>9s} {'kept p99/p50':>12s} {'idle ms':>8s}")
    for ms in a.ms:
        # every kind's sides in turn, in one run: the same machine for all
        sides = {f"{k} {n}": f for k in kinds for n, f in zip(("one", "two"), callables(ms * 1e-3, k))}
        for side, sp in zip(sides, percentiles(list(sides.values()), calls=a.calls)):
            print(f"{ms:9.2f} {side:>8s} {sp.p50 * 1e3:8.3f} {sp.p99 * 1e3:8.3f} {sp.p99 / sp.p50:7.2f} "
                  f"{sp.n_kept:4d}/{len(sp.calls):<4d} {sp.p99_kept / sp.p50_kept:12.2f} "
                  f"{sp.idle * 1e3:8.3f}", flush=True)


if __name__ == "__main__":
    main()
