"""Fused attention (`nn.attention`, passes/attention.py) against the three kernels it
replaces and OpenVINO, on a zoo transformer, in one process, the sides timed in turn.

    python bench/attention.py --only whisper_encoder
    python bench/attention.py --only bert,gpt2 --seq 512 --min-keys 1   # fused at any length
    python bench/attention.py --only bert --batch 4 --seq 64 --min-keys 1 --cpu --no-openvino
    python bench/attention.py --only whisper_encoder --cpu               # one thread, CPU time
    python bench/attention.py --only whisper_encoder --mcpu haswell

"unfused" is the same build with the pass's threshold above every sequence; "fused" with
`--min-keys` (default: the target's, passes/attention.py keys_to_fuse). Wall time: latency.blocks' best block
mean. `--cpu`: one thread per runtime and the calling thread's CPU time
(bench/cpu_time.py's reasoning), the median of `--repeat` blocks: a comparison that holds
while other processes load the machine, at the price of leaving out the parallel loops.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def _cpu_blocks(fns, number, repeat):
    """Median of `repeat` blocks of the calling thread's CPU seconds per call, in turn."""
    for f in fns:
        f()
    out = [[] for _ in fns]
    for _ in range(repeat):
        for i, f in enumerate(fns):
            f()
            c0 = time.thread_time()
            for _ in range(number):
                f()
            out[i].append((time.thread_time() - c0) / number)
    return [float(np.median(v)) for v in out]


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="whisper_encoder")
    p.add_argument("--seq", type=int, default=0, help="sequence length of the token models (0: the zoo's)")
    p.add_argument("--batch", type=int, default=0, help="batch of the token models (0: the zoo's)")
    p.add_argument("--no-openvino", action="store_true", help="tdsl's two sides alone")
    p.add_argument("--min-keys", type=int, default=0, help="the fused side's threshold (0: the target's, keys_to_fuse)")
    p.add_argument("--cpu", action="store_true", help="one thread each, timed by CPU time")
    p.add_argument("--number", type=int, default=5)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--mcpu", default="")
    a = p.parse_args(argv)
    if a.cpu:
        os.environ["TDSL_NUM_THREADS"] = "1"
    import tdsl.graph as G
    from tdsl.graph import zoo
    from tdsl.graph.passes import attention
    import ov_session
    from latency import blocks
    target = "llvm" + (f" -mcpu={a.mcpu}" if a.mcpu else "")
    threads = 1 if a.cpu else os.cpu_count()
    for name in a.only.split(","):
        if (a.seq or a.batch) and name != "whisper_encoder":
            make = zoo.MODELS[name]
            zoo.MODELS[name] = lambda make=make: (lambda m: (m[0], ((a.batch or m[1][0][0], a.seq or m[1][0][1]),
                                                                     m[1][1])))(make())
        model, x = zoo.export(name), zoo.example_input(name)
        inp = model.graph.input[0].name
        sides, kernels = {}, {}
        for side, keys in (("unfused", 1 << 62), ("fused", a.min_keys or attention.keys_to_fuse(target))):
            old, attention.MIN_KEYS = attention.MIN_KEYS, keys
            try:
                mod = G.optimize(G.from_onnx(model), target=target)
            finally:
                attention.MIN_KEYS = old
            kernels[side] = sum(isinstance(n.op, G.Function) and "attention" in n.op.name for n in mod.main.nodes())
            exe = G.build(mod, target=target)
            sides[side] = lambda exe=exe: exe.run(**{inp: x})[0]
        if ov_session.available() and not a.no_openvino:
            ov = ov_session.OVSession(model, threads)
            sides["openvino"] = lambda: ov.run(x)
        ref = sides["unfused"]()
        err = {k: float(np.abs(f() - ref).max()) for k, f in sides.items()}
        fns = list(sides.values())
        times = _cpu_blocks(fns, a.number, a.repeat) if a.cpu else blocks(fns, a.number, a.repeat)
        ms = dict(zip(sides, (t * 1e3 for t in times)))
        what = "CPU ms, 1 thread" if a.cpu else f"best block ms, {threads} threads"
        print(f"{name} ({target}, {what}; fused attention kernels: {kernels['fused']}; "
              f"max abs diff to unfused: " + ", ".join(f"{k} {v:.1e}" for k, v in err.items() if k != "unfused") + ")")
        print("  " + "  ".join(f"{k} {v:.2f}" for k, v in ms.items())
              + f"  fused/unfused {ms['fused'] / ms['unfused']:.3f}"
              + (f"  fused/openvino {ms['fused'] / ms['openvino']:.3f}  unfused/openvino "
                 f"{ms['unfused'] / ms['openvino']:.3f}" if "openvino" in ms else ""))


if __name__ == "__main__":
    main()
