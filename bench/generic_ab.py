"""Kernels generic in the channel count against one kernel per group, on a network built
with its symbolic sizes, in one process: what the shared kernels (strategy/cpu/generic.py)
save at build and whether they cost anything at run time.

    python bench/generic_ab.py densenet121                    # zoo names (bench/dynamic.py)
    TDSL_NUM_THREADS=1 python bench/generic_ab.py densenet121 --rounds 8

Each side is one cold build (bench/dynamic.cold_build) of the export's symbolic network:
`generic` as tdsl builds it, `per-group` with generic.find answering None, so that every
group compiles its own kernel, as it did with a symbolic batch before. Per size (the
smallest and the largest of the sweep): both sides' outputs against onnxruntime, then per
round the best block mean of `exe.run` of each side (bench/latency.blocks, the sides
taken in turn) and their ratio; the median and the spread of the ratios over rounds; and
per kernel family (bench/builds_ab.family) the best over rounds of each side's median
kernel time from the runtime's trace ring, the sides' order alternating by round.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from builds_ab import family  # noqa: E402
from dynamic import _input, _sweep, cold_build  # noqa: E402
from latency import blocks  # noqa: E402
from tdsl.graph.strategy.cpu import generic  # noqa: E402

SIDES = ("per-group", "generic")


@contextlib.contextmanager
def per_group():
    """Within it, no group is built generic in its channel count."""
    find = generic.find
    generic.find = lambda *a, **k: None
    try:
        yield
    finally:
        generic.find = find


def _families(exe, number):
    names, t, _ = exe.trace(number=number)
    out = collections.Counter()
    for n, s in zip(names, np.median(t, axis=0)):
        out[family(n)] += s
    return out


def run_model(name, rounds):
    model, shapes = _sweep(name)
    exes = {}
    for side in SIDES:
        with per_group() if side == "per-group" else contextlib.nullcontext():
            exe, _, cpu_s = cold_build(model, None, "llvm")
        exes[side] = exe
        print(f"{name} {side:9s}: build {cpu_s:.2f} s CPU, {exe.stats['compiled']} kernels compiled", flush=True)
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for shape in (shapes[0], shapes[-1]):
        x = _input(model, shape)
        ref = sess.run(None, {model.graph.input[0].name: x})[0]
        for side, exe in exes.items():
            err = float(np.abs(exe.run(x)[0] - ref).max() / np.abs(ref).max())
            print(f"  {'x'.join(map(str, shape))} {side:9s}: max |error| / max |onnxruntime| {err:.1e}")
        ratios, fams = [], {side: collections.defaultdict(list) for side in SIDES}
        for r in range(rounds):
            best = blocks([lambda e=exes[s]: e.run(x) for s in SIDES], number=3, repeat=3)
            ratios.append(best[1] / best[0])
            print(f"  round {r}: per-group {best[0] * 1e3:.2f} ms, generic {best[1] * 1e3:.2f} ms, "
                  f"generic/per-group {ratios[-1]:.3f}", flush=True)
            for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
                for f, s in _families(exes[side], 5).items():
                    fams[side][f].append(s)
        print(f"  {'x'.join(map(str, shape))}: generic/per-group median {np.median(ratios):.3f}, "
              f"spread {min(ratios):.3f}-{max(ratios):.3f} over {rounds} rounds")
        print(f"  {'family':40s} {'per-group ms':>12s} {'generic ms':>11s} {'ratio':>7s}")
        for f in sorted(fams["per-group"], key=lambda f: -min(fams["per-group"][f])):
            a, b = min(fams["per-group"][f]), min(fams["generic"].get(f, [np.nan]))
            print(f"  {f:40s} {a * 1e3:12.3f} {b * 1e3:11.3f} {b / a:7.3f}")
        sys.stdout.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", help="comma-separated zoo names")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        run_model(name, args.rounds)


if __name__ == "__main__":
    main()
