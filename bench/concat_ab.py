"""DenseNet-121's concatenations, one load from a chosen input (codegen/llvm/select_load.py)
against the per-vector select chain it replaces, in one process.

    python bench/concat_ab.py                        # static batch 1 and 8, dynamic 1, 4, 8
    python bench/concat_ab.py --onnx dense.onnx      # a saved export (symbolic batch)
    python bench/concat_ab.py --static 8 --dynamic   # only static batch 8
    python bench/concat_ab.py --threads 1            # one thread, timed in its CPU time

Both sides are built in this process with the compile cache off: "new" as shipped, "old"
with `select_load.try_emit` declining every chain (the branches per vector it replaces). Per configuration: the kernels
whose group holds a concatenation (their summed time from `Executor.profile`, and their
GB/s: bytes of their arguments and output over that time), and the whole network (block
means of `--number` calls); and each side's build seconds (the compile cache off, so
every kernel compiles). The sides alternate, the first side rotated each round; the
ratio new/old is taken per round and its median, least and greatest are printed (the
machine is shared: only such ratios mean anything). `--threads 1` runs every kernel on the
calling thread and times blocks in that thread's CPU time, which another process taking
the core does not inflate (memory bandwidth shared with it still does).

First, the kernels alone: DenseNet's concatenations (a block's input of 64, 128, 256
channels and 32-channel features) with its batch norm and ReLU inlined, and one as the
kernel's own output, built by `tdsl.auto_schedule` from the graph's definition of
concatenate, at batch 8 and 1.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

os.environ["TDSL_CACHE"] = "0"
if "--threads" in sys.argv:
    os.environ["TDSL_NUM_THREADS"] = sys.argv[sys.argv.index("--threads") + 1]
CLOCK = time.thread_time if os.environ.get("TDSL_NUM_THREADS") == "1" else time.perf_counter
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

import tdsl  # noqa: E402
import tdsl.graph as G  # noqa: E402

from tdsl.codegen.llvm import select_load  # noqa: E402


@contextlib.contextmanager
def old_lowering():
    """The LLVM backend emitting the select chain as written."""
    saved = select_load.try_emit
    select_load.try_emit = lambda em, e: None
    try:
        yield
    finally:
        select_load.try_emit = saved


def build(model, dims, old):
    from tdsl.codegen.llvm import jit
    G.executor.clear_kernel_cache()
    jit.clear_cache()       # LLVM's objects kept in memory by IR text: the kernels both sides share
    with old_lowering() if old else contextlib.nullcontext():
        t0, c0 = time.perf_counter(), time.process_time()
        exe = G.build(G.optimize(G.from_onnx(model, dims=dims), target=tdsl.target.Target("llvm")), target="llvm")
        took = (time.perf_counter() - t0, time.process_time() - c0)
    G.executor.clear_kernel_cache()
    jit.clear_cache()
    return exe, took


def builds(model, dims, rounds):
    """Both sides' executors, built `rounds` times each, alternating, the old side first
    (the process's first build also pays for what is loaded once: the first round's old
    build is printed but left out of the ratio); prints each build's wall/CPU seconds and
    the median ratio of CPU seconds new/old over the rounds."""
    took = [[], []]
    for _ in range(rounds):
        old, to = build(model, dims, True)
        new, tn = build(model, dims, False)
        took[0].append(tn)
        took[1].append(to)
    # each new build against the old build after it: the first old build stands alone
    rs = [n[1] / o[1] for n, o in zip(took[0], took[1][1:])] or [took[0][0][1] / took[1][0][1]]

    def fmt(v):
        return " ".join(f"{w:.1f}/{c:.1f}" for w, c in v)
    print(f"{'':10s} build s (compile cache off), wall/CPU: new {fmt(took[0])}; old {fmt(took[1])}; "
          f"CPU new/old {spread(rs)}", flush=True)
    return new, old


def _bytes(t):
    return int(np.prod([int(d) for d in t.shape])) * np.dtype(t.dtype).itemsize


def concat_kernels(exe, x):
    """(seconds a call in the kernels whose group concatenates, bytes they move, count)."""
    exe.run(x)
    rows = exe.profile(number=3)
    steps = {f"{k.name}#{i}": n for i, (k, _, n) in enumerate(exe.steps)}
    t = moved = count = 0
    for name, sec, _ in rows:
        n = steps.get(name)
        if n is None or not any(o.op == "concatenate" for o in n.op.nodes()):
            continue
        count += 1
        t += sec
        if all(isinstance(d, (int, np.integer)) or getattr(d, "is_number", False) for d in n.type.shape):
            moved += sum(_bytes(a.type) for a in n.args) + _bytes(n.type)
    return t, moved, count


def block(fn, number):
    t0 = CLOCK()
    for _ in range(number):
        fn()
    return (CLOCK() - t0) / number


KERNELS = [     # (label, batch, input channels, height = width, batch norm and ReLU inlined)
    ("bn+relu 7 in  256x56", 8, [64] + [32] * 6, 56, True),
    ("bn+relu 13 in 512x28", 8, [128] + [32] * 12, 28, True),
    ("bn+relu 25 in 1024x14", 8, [256] + [32] * 24, 14, True),
    ("concat 25 in 1024x14", 8, [256] + [32] * 24, 14, False),
    ("b1 bn+relu 25 in", 1, [256] + [32] * 24, 14, True),
]


def kernel(batch, chans, hw, consumer, old):
    from types import SimpleNamespace

    from tdsl.graph.strategy import topi
    ins = [tdsl.placeholder((batch, c, hw, hw), name=f"x{i}") for i, c in enumerate(chans)]
    total = sum(chans)
    out = topi.concatenate(ins, {"axis": 1}, SimpleNamespace(shape=(batch, total, hw, hw)))
    if consumer:
        sc, sh = tdsl.placeholder((total, 1, 1), name="sc"), tdsl.placeholder((total, 1, 1), name="sh")
        cat = out
        out = tdsl.compute(cat.shape, lambda b, c, h, w: tdsl.max(cat[b, c, h, w] * sc[c, 0, 0] + sh[c, 0, 0],
                                                                  tdsl.const(0.0, "float32")), name="bnrelu")
        ins += [sc, sh]
    with old_lowering() if old else contextlib.nullcontext():
        t0 = time.process_time()
        f = tdsl.build(tdsl.auto_schedule(out, "llvm"), ins + [out], target="llvm")
        took = time.process_time() - t0
    rng = np.random.default_rng(0)
    args = [tdsl.nd.array(rng.standard_normal([int(d) for d in t.shape]).astype(np.float32)) for t in ins]
    args.append(tdsl.nd.empty(tuple(int(d) for d in out.shape), "float32"))
    return (lambda: f(*args)), args, took


def kernels(rounds, number):
    print(f"{'kernel':22s} {'new ms':>8s} {'old ms':>8s} {'GB/s n':>6s} {'GB/s o':>6s} {'new/old':>22s} "
          f"{'build CPU s new/old':>20s}")
    for label, batch, chans, hw, consumer in KERNELS:
        (fn, an, bn), (fo, ao, bo) = (kernel(batch, chans, hw, consumer, old) for old in (False, True))
        fn(), fo()
        assert np.array_equal(an[-1].numpy(), ao[-1].numpy())
        moved = sum(a.numpy().nbytes for a in an)
        ts = [[], []]
        for r in range(rounds):
            for k in range(2):
                i = (r + k) % 2
                f = (fn, fo)[i]
                f()
                ts[i].append(block(f, number))
        rs = [a / b for a, b in zip(*ts)]
        print(f"{label:22s} {min(ts[0]) * 1e3:8.3f} {min(ts[1]) * 1e3:8.3f} {moved / min(ts[0]) / 1e9:6.1f} "
              f"{moved / min(ts[1]) / 1e9:6.1f} {spread(rs):>22s} {bn:9.2f}/{bo:.2f}", flush=True)


def spread(v):
    return f"{statistics.median(v):5.3f} [{min(v):.3f}..{max(v):.3f}]" if v else "      -"


def compare(label, sides, x, rounds, number):
    """sides: [new executor, old executor]; prints one row."""
    outs = [e.run(x)[0] for e in sides]
    for e in sides:
        e.run(x)
    # the same arithmetic on the same elements: the outputs are equal bit for bit
    assert np.array_equal(outs[0], outs[1]), f"{label}: new and old outputs differ"
    kern = [[], []]
    whole = [[], []]
    info = None
    for r in range(rounds):
        for k in range(2):
            i = (r + k) % 2
            time.sleep(0.05)
            t, moved, count = concat_kernels(sides[i], x)
            kern[i].append(t)
            info = info or {}
            info[i] = (moved, count)
            whole[i].append(block(lambda: sides[i].run(x), number))
    kr = [a / b for a, b in zip(*kern)] if kern[1][0] > 0 else []
    wr = [a / b for a, b in zip(*whole)]

    def ms(v):
        return f"{min(v) * 1e3:8.2f}"

    def gbs(i):
        moved, _ = info[i]
        return f"{moved / min(kern[i]) / 1e9:6.1f}" if moved and min(kern[i]) > 0 else "     -"
    print(f"{label:10s} {info[0][1]:4d} {ms(kern[0])} {ms(kern[1])} {gbs(0)} {gbs(1)} {spread(kr):>22s}   "
          f"{ms(whole[0])} {ms(whole[1])} {spread(wr):>22s}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--onnx", help="densenet121 exported with a symbolic batch (else exported now)")
    p.add_argument("--static", type=int, nargs="*", default=[1, 8])
    p.add_argument("--dynamic", type=int, nargs="*", default=[1, 4, 8])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--number", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="TDSL_NUM_THREADS (1: timed in CPU time)")
    p.add_argument("--kernel-rounds", type=int, default=30)
    p.add_argument("--build-rounds", type=int, default=1, help="builds of each side, alternating")
    a = p.parse_args()
    print(f"clock: {'CPU time of the calling thread' if CLOCK is time.thread_time else 'wall'}, "
          f"threads {os.environ.get('TDSL_NUM_THREADS', 'all')}")
    kernels(a.kernel_rounds, a.number)
    import onnx
    if a.onnx:
        model = onnx.load(a.onnx)
    else:
        from tdsl.graph import zoo
        model = zoo.export("densenet121", dynamic=True)
    print("densenet121, new = one load from a chosen concat input, old = the select chain; best of "
          f"{a.rounds} alternating rounds (ms), ratios new/old per round: median [least..greatest]")
    print(f"{'config':10s} {'cats':>4s} {'cat new':>8s} {'cat old':>8s} {'GB/s n':>6s} {'GB/s o':>6s} "
          f"{'concat kernels':>22s}   {'net new':>8s} {'net old':>8s} {'network':>22s}")
    rng = np.random.default_rng(0)
    for b in a.static:
        new, old = builds(model, {"batch": b}, a.build_rounds)
        x = rng.standard_normal((b, 3, 224, 224)).astype(np.float32)
        compare(f"static {b}", [new, old], x, a.rounds, a.number)
        del new, old
    if a.dynamic:
        new, old = builds(model, None, a.build_rounds)
        for b in a.dynamic:
            x = rng.standard_normal((b, 3, 224, 224)).astype(np.float32)
            compare(f"dynamic {b}", [new, old], x, a.rounds, a.number)


if __name__ == "__main__":
    main()
