"""A network's static builds against its dynamic one, size by size, in one process: where a
static build's strategy picks a worse kernel than the dynamic build's size class (issue
44: ViT at 2 images, 1.37x), the ratio shows it, and `--kernels` names the kernels.

    python bench/static_dynamic.py vit_b_16 --sizes 1,2,3,4,8
    python bench/static_dynamic.py bert --sizes 1x128,4x64 --kernels 5

The model is exported with its batch (and a transformer's sequence) symbolic
(bench/dynamic._sweep), built once dynamic and once static at each size, every build with
cold caches (bench/dynamic.cold_build). A size is the input's leading dims joined by "x";
the other dims are the model's example's. Per size, `--rounds` times: both executors in
turns (bench/latency.blocks, best block mean, the first side rotated), and the ratio
static/dynamic; the line gives each round's ratio, so the spread is on the page.
`--cpu`: one thread, each side timed by the calling thread's CPU clock instead
(bench/dense_rows.thread_blocks, best block): what another process's load on a shared
machine does not move as much (a vit_b_16 round read 0.53 on the wall clock so).
`--kernels N`: the N kernels whose static time exceeds the dynamic one's most
(Executor.profile, kernels paired by name in order of execution).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl  # noqa: E402
import dynamic  # noqa: E402
from dense_rows import thread_blocks  # noqa: E402
from latency import blocks  # noqa: E402


def shapes(name, sizes):
    """(symbolic model, [input shape per size]): `sizes` as '2' or '4x64' leading dims."""
    model, sweep = dynamic._sweep(name)
    rest = sweep[0]
    out = []
    for s in sizes.split(","):
        lead = tuple(int(v) for v in s.split("x"))
        out.append(lead + tuple(rest[len(lead):]))
    return model, out


def kernel_excess(dyn, st, top):
    """[(kernel, dynamic s, static s)] of the `top` kernels slower in `st` than in `dyn`,
    paired by name (without its step number and the build's numbering of its groups,
    `_1`) in order of execution."""
    def by_name(exe):
        rows = sorted(exe.profile(number=3), key=lambda r: int(r[0].rsplit("#", 1)[1]))
        named = defaultdict(list)
        for k, t, _ in rows:
            named[re.sub(r"_\d+$", "", k.rsplit("#", 1)[0])].append((k, t))
        return named
    d, s = by_name(dyn), by_name(st)
    pairs = [(sk, dt, stt) for name in s for (sk, stt), (_, dt) in zip(s[name], d.get(name, []))]
    return sorted(pairs, key=lambda p: p[1] - p[2])[:top]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--sizes", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kernels", type=int, default=0)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args(argv)
    if a.cpu:
        os.environ["TDSL_NUM_THREADS"] = "1"
    target = tdsl.target.Target(a.target)
    model, inputs = shapes(a.model, a.sizes)
    dyn = dynamic.cold_build(model, None, target)[0]
    print(f"{'model':12s} {'size':>14s} {'dyn ms':>8s} {'static':>8s} {'st/dyn':>7s}  rounds")
    for shape in inputs:
        st = dynamic.cold_build(model, dynamic._static_dims(model, shape), target)[0]
        x = dynamic._input(model, shape)
        ref = dyn.run(x)[0]
        got = st.run(x)[0]
        err = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30))
        if err > 1e-4:
            raise AssertionError(f"{a.model} at {shape}: static and dynamic differ by {err:.1e}")
        ratios, best = [], [float("inf")] * 2
        for _ in range(a.rounds):
            sides = [lambda: dyn.run(x), lambda: st.run(x)]
            t = thread_blocks(sides, a.number, a.repeat) if a.cpu else blocks(sides, a.number, a.repeat)
            ratios.append(t[1] / t[0])
            best = [min(b, v) for b, v in zip(best, t)]
        print(f"{a.model:12s} {'x'.join(map(str, shape)):>14s} {best[0] * 1e3:8.3f} {best[1] * 1e3:8.3f} "
              f"{best[1] / best[0]:7.2f}  {' '.join(f'{r:.2f}' for r in ratios)}", flush=True)
        for k, dt, stt in kernel_excess(dyn, st, a.kernels):
            print(f"    {k:40s} dynamic {dt * 1e3:8.3f} ms  static {stt * 1e3:8.3f} ms", flush=True)


if __name__ == "__main__":
    main()
