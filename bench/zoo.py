"""Real networks, tdsl.graph vs onnxruntime, in one run on this CPU (2 threads each).

    pip install -e '.[zoo]'
    python bench/zoo.py                    # the whole list
    python bench/zoo.py --only resnet      # models whose name contains "resnet"
    python bench/zoo.py --profile          # and the slowest kernels of each
    python bench/zoo.py --mcpu haswell     # tdsl's code for another CPU this one can run
    python bench/zoo.py --int8             # each model quantized (QDQ, onnxruntime's quantizer)

Each model is exported from torch (random weights, tdsl.graph.zoo; skipped when torch is
not installed) or built with onnx.helper (tdsl.graph.models: a 1-D and a 3-D CNN, the
MobileNetV2 blocks; no torch needed), imported, optimized and built (build seconds: cold, with an empty compile cache, and warm, a second build that
reads it, the first executor released; beside them, onnxruntime's session creation, its
own build), checked against onnxruntime (max abs error over the
output's max magnitude) and timed in blocks taken in turn with onnxruntime (a pause, a
warm-up, 5 calls; best of 3 blocks: bench/graph._interleaved), so onnxruntime's spinning
threads do not slow tdsl's next call. First the CPU and its measured FMA peak; per model
tdsl's share of that peak (conv/dense/matmul flops over its latency; a conv's taps that
read padding are not counted: both sides skip them in dilated convs on small images). The
last line is the geometric mean of the latency ratios.

With --int8 each model is first quantized by onnxruntime's quantizer (tdsl.graph.models.
quantize_qdq: uint8 activations, per-channel int8 weights, calibrated on two random
inputs) and compared with onnxruntime's int8 session; the error column is then in units of
the output's quantization step, and the peak share is of the integer dot-product peak (4
products per float32 lane where the CPU has AVX512-VNNI).
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
from tdsl.examples import peak  # noqa: E402
from tdsl.graph import models  # noqa: E402
from common import add_target_option, print_target, target_from  # noqa: E402
from graph import _interleaved, _ort_session, flops  # noqa: E402

# name -> onnx.helper builder, input shape
HELPER = {
    "conv1d_net": (models.conv1d_net, (1, 1, 16000)),
    "conv3d_net": (models.conv3d_net, (1, 3, 8, 56, 56)),
    "mobilenetv2_blocks": (lambda: models.mobilenetv2_blocks(1, 112), (1, 3, 112, 112)),
}


def _model_and_input(name):
    if name in HELPER:
        make, shape = HELPER[name]
        return make(), np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return zoo.export(name), zoo.example_input(name)


def _build(model, target):
    G.executor.clear_kernel_cache()               # only the disk cache may help
    t0 = time.perf_counter()
    exe = G.build(G.optimize(G.from_onnx(model), target=target), target=str(target))
    return time.perf_counter() - t0, exe


def _output_step(model):
    """The scale of the DequantizeLinear that makes a QDQ model's output, or None."""
    from onnx import numpy_helper
    out = model.graph.output[0].name
    node = next((n for n in model.graph.node if out in n.output), None)
    inits = {i.name: i for i in model.graph.initializer}
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in inits:
        return None
    return float(numpy_helper.to_array(inits[node.input[1]]).reshape(-1)[0])


def run_one(name, target, profile, number, repeat, threads, peak, int8=False):
    model, x = _model_and_input(name)
    work = flops(G.from_onnx(model))
    if int8:
        model = models.quantize_qdq(model, feeds=2)
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
    step = _output_step(model) if int8 else None
    err = float(np.abs(out - ref).max() / (step or max(float(np.abs(ref).max()), 1e-30)))
    t_tdsl, t_ort = _interleaved(lambda: exe.run(x), lambda: sess.run(None, feed), number, repeat)
    share = work / t_tdsl / 1e9 / peak
    err_txt = f"{err:6.0f} st" if step else f"{err:9.1e}"
    print(f"{name:20s} {cold:7.1f} {warm:7.2f} {ort_init:7.2f} {len(exe.steps):7d} {t_tdsl * 1e3:9.2f} {t_ort * 1e3:9.2f} "
          f"{t_tdsl / t_ort:7.2f}x {share:6.1%} {err_txt}", flush=True)
    if profile:
        time.sleep(0.3)   # onnxruntime's threads, still spinning after its last block, took a core
        exe.run(x)
        print(exe.profile_text(number=number, top=15))
    return t_tdsl / t_ort


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated substrings of model names")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--number", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--int8", action="store_true", help="each model quantized (QDQ) against onnxruntime's int8")
    add_target_option(p)
    a = p.parse_args(argv)
    target = target_from(a)
    threads = target.num_cores
    peak_gflops = print_target(target)
    per_fma = 4 if a.int8 and target.has_vnni else 1
    if per_fma > 1:
        print(f"int8 peak (vpdpbusd: 4 products a float32 lane): {per_fma * peak_gflops:.1f} GOP/s")
    print(f"onnxruntime and tdsl: {threads} threads each\n")
    try:
        import torch  # noqa: F401
        exported = list(zoo.MODELS)
    except ImportError:
        print("torch is not installed: only the onnx.helper networks\n")
        exported = []
    names = [n for n in list(HELPER) + exported if not a.only or any(s in n for s in a.only.split(","))]
    print(f"{'model':20s} {'build s':>7s} {'warm s':>7s} {'ort s':>7s} {'kernels':>7s} {'tdsl ms':>9s} {'ort ms':>9s} "
          f"{'ratio':>8s} {'peak':>6s} {'max err':>9s}")
    ratios, failed = [], []
    for name in names:
        try:
            ratios.append(run_one(name, target, a.profile, a.number, a.repeat, threads, per_fma * peak_gflops,
                                  a.int8))
        except Exception as e:  # a model that fails is reported and the list goes on
            failed.append(name)
            print(f"{name:20s} failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", flush=True)
    again = peak.measure(target)[0]
    if again > 1.05 * peak_gflops:
        print(f"\nnote: the FMA peak measured {again:.1f} GFLOP/s at the end (the machine was "
              f"busier at the start); shares above are of {peak_gflops:.1f}")
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeometric mean tdsl/onnxruntime over {len(ratios)} models: {geo:.2f}x; "
              f"worst {max(ratios):.2f}x" + (f"; failed: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    main()
