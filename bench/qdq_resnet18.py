"""A quantized ResNet-18 (onnxruntime's quantizer, QDQ form, uint8 activations and per-channel
int8 weights) in tdsl against onnxruntime's int8 session: the agreement of the outputs in
units of the output's quantization step, and the latency of each, in blocks of runs
alternating between the two, each after a pause and a warm-up (the median of each block;
the spread says how noisy the machine was)."""
import argparse
import time

import numpy as np

import common  # (puts the repository on the path)
import tdsl.graph as G
from tdsl.graph import models


def blocks(fn, n_blocks, runs, pause_s=0.3, warmup_s=0.2):
    """Block medians; each block after a pause (onnxruntime's worker threads spin for a
    while after a run and would take a core from tdsl's next kernels) and a warm-up."""
    out = []
    for _ in range(n_blocks):
        time.sleep(pause_s)
        t_end = time.perf_counter() + warmup_s
        while time.perf_counter() < t_end:
            fn()
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        out.append(float(np.median(ts)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    common.add_target_option(ap)
    a = ap.parse_args()
    target = common.target_from(a)
    import onnxruntime as ort
    q = models.quantize_qdq(models.resnet18(size=a.size, width=a.width))
    x = np.random.default_rng(1).standard_normal((1, 3, a.size, a.size)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(q.SerializeToString(), so, providers=["CPUExecutionProvider"])
    t = time.perf_counter()
    exe = G.build(G.optimize(G.from_onnx(q), target=target), target=target)
    print(f"tdsl build {time.perf_counter() - t:.1f} s")
    ref = sess.run(None, {"input": x})[0]
    got = exe.run(x)[0]
    step = float(np.min(np.diff(np.unique(ref)))) if np.unique(ref).size > 1 else 1.0
    steps = np.rint(np.abs(got - ref) / step)
    print(f"outputs: max diff {steps.max():.0f} quantization steps, {np.mean(steps == 0):.1%} exact")
    tt, to = [], []
    for _ in range(a.blocks):
        tt += blocks(lambda: exe.run(x), 1, a.runs)
        to += blocks(lambda: sess.run(None, {"input": x}), 1, a.runs)
    print(f"resnet18 size {a.size} width {a.width}, {a.blocks} blocks of {a.runs} runs (block medians, ms)")
    print(f"  tdsl        {' '.join(f'{v * 1e3:7.2f}' for v in tt)}   best {min(tt) * 1e3:.2f}")
    print(f"  onnxruntime {' '.join(f'{v * 1e3:7.2f}' for v in to)}   best {min(to) * 1e3:.2f}")
    print(f"  tdsl / onnxruntime (best blocks): {min(tt) / min(to):.2f}x")


if __name__ == "__main__":
    main()
