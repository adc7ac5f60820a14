"""Real networks, tdsl.graph vs onnxruntime, in one run on this CPU (2 threads each).

    pip install -e '.[zoo]'
    python bench/zoo.py                    # the whole list
    python bench/zoo.py --only resnet      # models whose name contains "resnet"
    python bench/zoo.py --profile          # and the slowest kernels of each
    python bench/zoo.py --mcpu haswell     # tdsl's code for another CPU this one can run

Each model is exported from torch (random weights, tdsl.graph.zoo), imported, optimized and
built (build seconds: cold, with an empty compile cache, and warm, a second build that
reads it, the first executor released; beside them, onnxruntime's session creation, its
own build), checked against onnxruntime (max abs error over the
output's max magnitude) and timed alternately with onnxruntime, best of repeats. The last
line is the geometric mean of the latency ratios.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl.graph as G  # noqa: E402
from tdsl.graph import zoo  # noqa: E402
from common import add_target_option, target_from  # noqa: E402
from graph import _interleaved, _ort_session  # noqa: E402


def _build(model, target):
    G.executor.clear_kernel_cache()               # only the disk cache may help
    t0 = time.perf_counter()
    exe = G.build(G.optimize(G.from_onnx(model)), target=str(target))
    return time.perf_counter() - t0, exe


def run_one(name, target, profile, number, repeat, threads):
    model = zoo.export(name)
    x = zoo.example_input(name)
    with tempfile.TemporaryDirectory(prefix="zoo-cache-") as cache:
        os.environ["TDSL_CACHE_DIR"] = cache      # cold: an empty compile cache
        cold, exe = _build(model, target)
        del exe                                   # a rebuild replaces the executor
        warm, exe = _build(model, target)         # warm: a new build reading that cache
    os.environ.pop("TDSL_CACHE_DIR")
    out = exe.run(x)[0]
    t0 = time.perf_counter()
    sess = _ort_session(model, threads)
    ort_init = time.perf_counter() - t0
    feed = {model.graph.input[0].name: x}
    ref = sess.run(None, feed)[0]
    err = float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-30))
    t_tdsl, t_ort = _interleaved(exe._run_kernels, lambda: sess.run(None, feed), number, repeat)
    print(f"{name:20s} {cold:7.1f} {warm:7.2f} {ort_init:7.2f} {len(exe.steps):7d} {t_tdsl * 1e3:9.2f} {t_ort * 1e3:9.2f} "
          f"{t_tdsl / t_ort:7.2f}x {err:9.1e}", flush=True)
    if profile:
        print(exe.profile_text(number=number, top=15))
    return t_tdsl / t_ort


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated substrings of model names")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--number", type=int, default=5)
    p.add_argument("--repeat", type=int, default=5)
    add_target_option(p)
    a = p.parse_args(argv)
    target = target_from(a)
    threads = target.num_cores
    print(target.describe())
    print(f"\nonnxruntime and tdsl: {threads} threads each\n")
    names = [n for n in zoo.MODELS if not a.only or any(s in n for s in a.only.split(","))]
    print(f"{'model':20s} {'build s':>7s} {'warm s':>7s} {'ort s':>7s} {'kernels':>7s} {'tdsl ms':>9s} {'ort ms':>9s} "
          f"{'ratio':>8s} {'max err':>9s}")
    ratios, failed = [], []
    for name in names:
        try:
            ratios.append(run_one(name, target, a.profile, a.number, a.repeat, threads))
        except Exception as e:  # a model that fails is reported and the list goes on
            failed.append(name)
            print(f"{name:20s} failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", flush=True)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeometric mean tdsl/onnxruntime over {len(ratios)} models: {geo:.2f}x; "
              f"worst {max(ratios):.2f}x" + (f"; failed: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    main()
