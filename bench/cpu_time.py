"""Whole networks on one thread each, tdsl against onnxruntime and OpenVINO, timed by the
CPU time of the calling thread: a comparison that holds on a machine other processes load.

    python bench/cpu_time.py --only mobilenet_v2,squeezenet1_1
    python bench/cpu_time.py --only resnet18 --mcpu haswell   # OpenVINO capped at AVX2 too

On a shared machine a parallel run's wall time measures the other processes as much as the
runtime: a worker that loses its core stalls the whole parallel loop. With one thread each,
all three runtimes compute on the thread that calls them (tdsl with TDSL_NUM_THREADS=1,
onnxruntime with one intra-op thread, OpenVINO with INFERENCE_NUM_THREADS=1, whose calling
thread's CPU time matches its wall time), so `time.thread_time` counts the run's own work
and not the time another process held the core. Beside the CPU-time medians it prints each
side's best wall time. What this leaves out is how each runtime scales to more cores: a
network one runtime runs faster on one thread and slower on two loses in its parallel
loops (their count, size and balance), not in its kernels.

With --mcpu for a CPU with narrower vectors than this one, OpenVINO is capped at that ISA as
in bench/zoo.py (bench/isa_cap.py; --native-refs: not), and a line under a model names its
layers that ran wider anyway; onnxruntime cannot be capped.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import tdsl  # noqa: E402
import tdsl.graph as G  # noqa: E402
from common import add_target_option, target_from  # noqa: E402
from graph import _ort_session  # noqa: E402
import isa_cap  # noqa: E402
import ov_session  # noqa: E402
from zoo import _model_and_input  # noqa: E402


def thread_cpu(fns, calls):
    """(CPU seconds of the calling thread, wall seconds) of each of `calls` calls of each
    callable in `fns`, the callables taken in turn call by call: arrays of shape
    (len(fns), calls)."""
    cpu, wall = np.zeros((len(fns), calls)), np.zeros((len(fns), calls))
    for f in fns:
        f()
    for j in range(calls):
        for i, f in enumerate(fns):
            c0, w0 = time.thread_time(), time.perf_counter()
            f()
            cpu[i, j], wall[i, j] = time.thread_time() - c0, time.perf_counter() - w0
    return cpu, wall


def run_model(name, target, calls, cap=""):
    model, x = _model_and_input(name)
    exe = G.build(G.optimize(G.from_onnx(model), target=target), target=str(target))
    feed = {model.graph.input[0].name: x}
    sess = _ort_session(model, 1)
    fns = [lambda: exe.run(x), lambda: sess.run(None, feed)]
    if ov_session.available():
        ov = ov_session.OVSession(model, 1)
        fns.append(lambda: ov.run(x))
        wider = isa_cap.ov_note(isa_cap.ov_layer_isas(ov.compiled), cap)
    cpu, wall = thread_cpu(fns, calls)
    med, best = np.median(cpu, axis=1) * 1e3, wall.min(axis=1) * 1e3
    sides = "  ".join(f"{m:8.3f}" for m in med)
    ratios = "  ".join(f"{med[0] / m:6.2f}x" for m in med[1:])
    walls = " / ".join(f"{b:.3f}" for b in best)
    print(f"{name:30s} {sides}  {ratios}   {walls}", flush=True)
    if len(fns) > 2 and wider:
        print(f"{'':30s} note: {wider}")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="mobilenet_v2,squeezenet1_1,resnet18,mobilenet_v3_small,"
                   "efficientnet_b0,shufflenet_v2_x1_0,regnet_y_400mf",
                   help="comma-separated model names (zoo or bench/zoo.py's helpers)")
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--native-refs", action="store_true",
                   help="with --mcpu for a narrower CPU: leave OpenVINO at the host's ISA")
    add_target_option(p)
    a = p.parse_args(argv)
    os.environ["TDSL_NUM_THREADS"] = "1"     # before the first kernel loads
    target = target_from(a)
    host = tdsl.target.Target.host()
    cap = "" if a.native_refs else isa_cap.cap_for(target, host)
    if cap:
        isa_cap.apply(cap)                    # before ov_session.available() loads openvino
    ov = f"  {'ov':>8s}" if ov_session.available() else ""
    print(f"{target.describe()}\none thread each; CPU ms of the calling thread (median of "
          f"{a.calls} calls), tdsl's ratio to each, then the best wall ms of each")
    for line in isa_cap.header(isa_cap.cap_for(target, host), a.native_refs,
                               f"{host.cpu}, {host.vector_bits}-bit vectors"):
        print(line)
    print(f"{'model':30s} {'tdsl':>8s}  {'ort':>8s}{ov}")
    for name in a.only.split(","):
        run_model(name, target, a.calls, cap)


if __name__ == "__main__":
    main()
