"""What every benchmark prints first: the target it builds for and the machine's measured
fp32 FMA peak (a tdsl kernel, `tdsl.examples.peak`), so each kernel's share of it can be
reported beside its ratio to the reference measured in the same run."""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl  # noqa: E402
from tdsl.examples import peak  # noqa: E402


@contextlib.contextmanager
def frozen_heap():
    """Within it, the garbage collector leaves alone every object that existed before.
    A bench process holds torch, transformers, the exported models and earlier executors
    (~500k objects); a full collection of that heap takes 0.4-0.8 s, and whether one falls
    inside a timed build depends only on where the collector's counters stand, so builds of
    the same model took 1.4 or 2.1 s. Frozen, a build pays only for collections of its own
    objects, as it would in a process that has just loaded one model."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def add_target_option(parser):
    parser.add_argument("--mcpu", default="",
                        help="build for this CPU (e.g. haswell, znver3) instead of the host's; "
                             "it must run on this machine")


def target_from(args) -> "tdsl.target.Target":
    t = tdsl.target.Target(f"llvm -mcpu={args.mcpu}" if args.mcpu else "llvm")
    if not t.runs_here:
        raise SystemExit(f"--mcpu {args.mcpu}: this machine cannot run code for it")
    return t


def print_target(t) -> float:
    """Prints the target and returns its measured FMA peak in GFLOP/s."""
    host = tdsl.target.Target.host()
    print(t.describe())
    if t != host:
        print(f"{'host':>12s}: {host.cpu}, {host.vector_bits}-bit vectors")
    gflops, chains = settled_peak(t)
    print(f"{'FMA peak':>12s}: {gflops:.1f} GFLOP/s fp32 (measured: {chains} FMA chains per core "
          f"on {t.num_cores} cores)\n")
    return gflops


def settled_peak(t, tries=4, gap_s=0.3):
    """The best of `tries` peak measurements `gap_s` apart: on a machine shared with other
    jobs one measurement read half the peak while another job held a core for a moment."""
    best = (0.0, 0)
    for i in range(tries):
        if i:
            time.sleep(gap_s)
        best = max(best, peak.measure(t))
    return best


def timings(fn, number=3, repeat=7, warmup_s=0.1):
    """`repeat` timings (seconds per call) of `number` calls each, after `warmup_s` of
    untimed calls (numpy's OpenBLAS and onnxruntime's threads spin for ~0.1 s after a run
    and would slow whatever runs next)."""
    t_end = time.perf_counter() + warmup_s
    fn()
    while time.perf_counter() < t_end:
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        out.append((time.perf_counter() - t0) / number)
    return out


def interleaved_samples(fns, blocks, number, warmup_s=0.2, pause_s=0.3):
    """Per-call seconds of each callable in `fns`, `blocks * number` calls each, timed in
    blocks taken in turn (a block of the first, one of the second, ...) so that all see the
    same machine load on a shared CPU. Before each block: a pause of `pause_s` (the other
    side's worker threads may still spin for a while after its run) and `warmup_s` of
    untimed calls. Returns one list of call times per callable."""
    for f in fns:
        f()
    out = [[] for _ in fns]
    for _ in range(blocks):
        for f, times in zip(fns, out):
            time.sleep(pause_s)
            t_end = time.perf_counter() + warmup_s
            while time.perf_counter() < t_end:
                f()
            for _ in range(number):
                t0 = time.perf_counter()
                f()
                times.append(time.perf_counter() - t0)
    return out
