"""Network latency, tdsl.graph vs onnxruntime, in one run on this CPU.

    python bench/graph.py            # ResNet-18 224x224, MobileNetV2 blocks, MLP, transformer layer
    python bench/graph.py --quick    # smaller inputs
    python bench/graph.py --profile  # per-kernel times of each network
    python bench/graph.py --mcpu haswell   # tdsl's code for another CPU this one can run

Prints the target and the machine's measured FMA peak, then per network: build time, tdsl
and onnxruntime latency (best of repeats, measured alternately so both see the same load
on a shared CPU), their ratio, tdsl's share of the FMA peak (conv/dense/matmul flops), the
largest relative difference of the outputs, and the peak intermediate memory of the plan.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl.graph as G  # noqa: E402
from tdsl.graph import models  # noqa: E402
from common import add_target_option, print_target, target_from  # noqa: E402
from latency import blocks  # noqa: E402


def _ort_session(model, threads=0):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads      # 0: onnxruntime's default (one per core)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _interleaved(f_a, f_b, number, repeat, warmup_s=0.2, pause_s=0.3):
    """Best-of-`repeat` mean seconds of two callables, timed in blocks taken in turn
    (latency.blocks: a pause, a warm-up, `number` calls)."""
    return blocks([f_a, f_b], number, repeat, warmup_s, pause_s)


def _taps_in_image(n):
    """Multiply-adds per (output channel, input channel) of conv node `n` whose input tap
    lies inside the image, not in its zero padding (a dilated conv on a small image reads
    mostly padding, and those taps are skipped, by tdsl and onnxruntime alike)."""
    a = n.attrs
    sizes, outs, ks = n.args[0].type.shape[2:], n.type.shape[2:], n.args[1].type.shape[2:]
    nd = len(sizes)
    total = 1
    for d in range(nd):
        o = np.arange(outs[d])[:, None] * a["strides"][d]
        pos = o + np.arange(ks[d])[None, :] * a["dilation"][d] - a["padding"][d]
        total *= int(((pos >= 0) & (pos < sizes[d])).sum())
    return total


def flops(mod):
    """Multiply-add flops of the network's convolutions and matrix products (2 per MAC),
    a convolution's taps that read padding not counted."""
    total = 0
    for n in mod.main.nodes():
        if not isinstance(n.op, str):
            continue
        out = n.type.shape
        if n.op.startswith("nn.conv") and not n.op.endswith("transpose"):
            w = n.args[1].type.shape
            total += 2 * out[0] * w[0] * w[1] * _taps_in_image(n)
        elif n.op.startswith("nn.conv"):   # per input element
            total += 2 * int(np.prod(n.args[0].type.shape)) * int(np.prod(n.args[1].type.shape[1:]))
        elif n.op in ("nn.dense", "nn.matmul", "nn.batch_matmul"):
            total += 2 * int(np.prod(out)) * n.args[0].type.shape[-1]
    return total


def bench(name, model, shape, number, repeat, profile=False, target="llvm", peak=None):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    t0 = time.perf_counter()
    imported = G.from_onnx(model)
    work = flops(imported)
    mod = G.optimize(imported, target=target)
    exe = G.build(mod, target=str(target))
    build_s = time.perf_counter() - t0
    out = exe.run(x)[0]
    sess = _ort_session(model)
    feed = {model.graph.input[0].name: x}
    ref = sess.run(None, feed)[0]
    err = float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))
    t_tdsl, t_ort = _interleaved(lambda: exe.run(x), lambda: sess.run(None, feed), number, repeat)
    share = work / t_tdsl / 1e9 / peak if peak else 0.0
    print(f"{name:28s} {build_s:8.1f} {len(exe.steps):8d} {t_tdsl * 1e3:10.2f} {t_ort * 1e3:10.2f} "
          f"{t_tdsl / t_ort:7.2f}x {share:6.0%} {err:10.1e} {exe.peak_memory_bytes / 2**20:9.2f}", flush=True)
    if profile:
        print(exe.profile_text(number=max(1, number // 2), top=12))
    return t_tdsl, t_ort


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--only", default="")
    add_target_option(p)
    a = p.parse_args(argv)
    target = target_from(a)
    peak = print_target(target)
    size = 112 if a.quick else 224
    nets = [
        (f"resnet18 b1 {size}x{size}", models.resnet18(1, size), (1, 3, size, size), 5, 5),
        ("mobilenetv2 blocks b1 112", models.mobilenetv2_blocks(1, 112), (1, 3, 112, 112), 10, 3),
        ("mlp b8 784-512-256-10", models.mlp(8), (8, 784), 50, 3),
        ("transformer layer s128 d256", models.transformer_encoder(1, 128, 256, 4, 1024), (1, 128, 256), 10, 3),
    ]
    print(f"{'network':28s} {'build s':>8s} {'kernels':>8s} {'tdsl ms':>10s} {'ort ms':>10s} {'ratio':>8s} "
          f"{'peak':>6s} {'max rel':>10s} {'peak MiB':>9s}")
    for name, model, shape, number, repeat in nets:
        if a.only and a.only not in name:
            continue
        bench(name, model, shape, number, repeat, a.profile, target, peak)


if __name__ == "__main__":
    main()
