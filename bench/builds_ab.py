"""Dynamic against static builds of one network at one size, kernel by kernel, over
several builds of each side: what tells a kernel that is slower with symbolic sizes
from a build that happened to be slower (memory placement, code placement) or a
machine that was busier while one side ran.

    python bench/builds_ab.py distilbert,t5_encoder --size 1x1 --builds 3
    TDSL_NUM_THREADS=1 python bench/builds_ab.py distilbert --size 8x128 --number 12

Each build is cold (bench/dynamic.cold_build: no kernel reused from another build),
static at the size or with the exported symbolic batch and sequence (reserved at the
largest sizes of the sweep first and run at the sweep's earlier sizes, as in
bench/dynamic.py). Per build: the best block of
`exe.run` with the last outputs held (bench/latency.blocks, every build's blocks taken in
turn), and the kernel walk from the runtime's trace ring (Executor.trace: the calls'
median, the best of `--traces` traces taken in turn), whose difference is what a run
costs outside its kernels. Per kernel family (the kernel's name without its size-class
suffix: `fused_dense_add_small` is a `fused_dense_add`; attention and its head
reshapes together, since the two builds fuse them differently): the median over builds
of each build's best trace, static and dynamic, and their ratio. Models are the exports
of bench/dynamic.py (`--models` folder, `/tmp/dyn` by default) or `zoo.export` of them.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dynamic import cold_build  # noqa: E402
from latency import blocks  # noqa: E402
from tdsl.graph import zoo  # noqa: E402

SWEEP = ((1, 1), (1, 16), (1, 128), (1, 512), (4, 64))
RESERVE = {"batch": 9, "sequence": 512}
_ATTENTION = ("attention", "softmax", "matmul", "isnan", "transpose")


def family(kernel: str) -> str:
    """The family of a kernel named as Executor.trace names it (`fused_dense_add_small#3`)."""
    base = re.sub(r"_\d+$", "", re.sub(r"_(small|one|short_keys|narrow)$", "", kernel.split("#")[0]))
    if "dense" not in base and any(w in base for w in _ATTENTION):
        return "attention and heads"
    return base


def _model(name, folder):
    path = os.path.join(folder, f"{name}.onnx")
    return onnx.load(path) if os.path.exists(path) else zoo.export(name, dynamic=True)


def _builds(model, x, count):
    """[(side, executor)]: `count` cold builds of each side, alternating."""
    out = []
    for _ in range(count):
        for side, dims in (("static", dict(zip(("batch", "sequence"), x.shape))), ("dynamic", None)):
            exe = cold_build(model, dims, "llvm")[0]
            if dims is None:
                exe.reserve(**RESERVE)
                for b, s in SWEEP:
                    exe.run(np.zeros((b, s), np.int64))
            exe.run(x)
            out.append((side, exe))
    return out


def _traces(exes, number, traces):
    """Per build: the best of `traces` walks (each the median of `number` calls) and
    {family: best seconds}."""
    walks = [float("inf")] * len(exes)
    fams = [collections.defaultdict(lambda: float("inf")) for _ in exes]
    for _ in range(traces):
        for j, (_, exe) in enumerate(exes):
            time.sleep(0.05)
            names, per, total = exe.trace(number)
            walks[j] = min(walks[j], float(np.median(total)))
            sums = collections.Counter()
            for n, t in zip(names, np.median(per, axis=0)):
                sums[family(n)] += t
            for k, t in sums.items():
                fams[j][k] = min(fams[j][k], t)
    return walks, fams


def run_one(name, size, count, number, repeat, traces, folder):
    model = _model(name, folder)
    x = np.random.default_rng(0).integers(0, 1000, size).astype(np.int64)
    exes = _builds(model, x, count)
    held = [None]

    def holding(exe):
        def call():
            held[0] = exe.run(x)
        return call
    best = blocks([holding(e) for _, e in exes], number, repeat)
    walks, fams = _traces(exes, number, traces)
    side = {s: [j for j, (t, _) in enumerate(exes) if t == s] for s in ("static", "dynamic")}
    print(f"{name} {size[0]}x{size[1]}, ms per build: run (best block), kernel walk (best trace)")
    for s, idx in side.items():
        print(f"  {s:8s} run " + " ".join(f"{best[j] * 1e3:.4f}" for j in idx)
              + "   walk " + " ".join(f"{walks[j] * 1e3:.4f}" for j in idx))

    def med(values, s):
        return float(np.median([values[j] for j in side[s]]))
    outside = {s: med([b - w for b, w in zip(best, walks)], s) for s in side}
    print(f"  dynamic/static: run {med(best, 'dynamic') / med(best, 'static'):.3f}, walk "
          f"{med(walks, 'dynamic') / med(walks, 'static'):.3f}; outside the walk "
          f"{outside['static'] * 1e6:.1f} us static, {outside['dynamic'] * 1e6:.1f} us dynamic")
    for k in sorted(set().union(*fams)):
        st = med([f.get(k, 0.0) for f in fams], "static")
        dy = med([f.get(k, 0.0) for f in fams], "dynamic")
        ratio = f"{dy / st:6.3f}" if st > 0 else "     -"
        print(f"    {k:45s} static {st * 1e3:8.4f} dynamic {dy * 1e3:8.4f} {ratio}")
    sys.stdout.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", help="comma-separated transformer names (bench/dynamic.py's)")
    ap.add_argument("--size", default="1x1", help="batch x sequence")
    ap.add_argument("--builds", type=int, default=3, help="cold builds of each side")
    ap.add_argument("--number", type=int, default=300, help="calls per block and per trace")
    ap.add_argument("--repeat", type=int, default=5, help="blocks per build")
    ap.add_argument("--traces", type=int, default=3, help="traces per build")
    ap.add_argument("--models-dir", default="/tmp/dyn", dest="folder")
    args = ap.parse_args(argv)
    size = tuple(int(v) for v in args.size.split("x"))
    for name in args.models.split(","):
        run_one(name, size, args.builds, args.number, args.repeat, args.traces, args.folder)


if __name__ == "__main__":
    main()
