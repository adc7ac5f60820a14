"""Real networks, tdsl.graph vs onnxruntime and OpenVINO, in one run on this CPU (2 threads each).

    pip install -e '.[zoo]'                # torch, torchvision, transformers, onnxruntime
    pip install -e '.[openvino]'           # optional: OpenVINO's columns
    python bench/zoo.py                    # the whole list
    python bench/zoo.py --only resnet      # models whose name contains "resnet"
    python bench/zoo.py --profile          # and the slowest kernels of each
    python bench/zoo.py --mcpu haswell     # tdsl's code for another CPU this one can run,
                                           # OpenVINO capped at that ISA (bench/isa_cap.py)
    python bench/zoo.py --mcpu haswell --native-refs   # the references uncapped
    python bench/zoo.py --threads 1        # every side on one thread (a busy machine)
    python bench/zoo.py --int8             # each model quantized (QDQ, onnxruntime's quantizer)
    python bench/zoo.py --dynamic          # symbolic batch/sequence, built once, swept over sizes
    python bench/zoo.py --dynamic --builds # only their builds against the static ones, cold

Each model is exported from torch (random weights, tdsl.graph.zoo; skipped when torch is
not installed) or built with onnx.helper (tdsl.graph.models: a 1-D and a 3-D CNN, the
MobileNetV2 blocks; no torch needed), imported, optimized and built (build seconds: cold,
with an empty compile cache, and warm, a second build that reads it, the first executor
released; beside them, onnxruntime's session creation and OpenVINO's read and compile,
their own builds), checked against onnxruntime (max abs error over the output's max
magnitude).

OpenVINO (when installed; without it a note says so and its columns are left out) runs
its CPU plugin with the same number of threads, the latency hint (one stream) and float32
inference precision set explicitly (bench/ov_session.py: a CPU with bf16 would otherwise
run in bf16).

With --mcpu for a CPU with narrower vectors than this one (haswell on an AVX-512 host),
OpenVINO is held to that ISA (bench/isa_cap.py: ONEDNN_MAX_CPU_ISA and OV_CPU_MAX_ISA, set
before it loads; a note under a model says which of its layers ran wider anyway, e.g.
FullyConnected layers in MLAS), so that its column is what a user of that CPU would see;
onnxruntime cannot be capped and runs at the host's ISA. The header says which reference
ran at which ISA, the "tdsl / ov" column and a summary line compare with the capped
OpenVINO alone. --native-refs leaves both uncapped.

Timing, every side in the same process and in turn (bench/latency.py), so that the
machine load is the same for all and one side's spinning threads (onnxruntime's and
OpenVINO's spin after a run) do not slow the next: "best block", the least block mean
over 3 rounds of one turn per side, the first side rotated (a turn: a pause, 0.2 s of
warm-up, then blocks of 5 calls, or of as many as last 5 ms where calls are short, as
many blocks as fit in 50 ms; bench/latency.blocks); "p50/p99", of at least 100 single calls per side, in runs of
25 taken in turn, each after a pause; "idle", the median first call of those runs, the
first call after an idle pause of 0.3 s. A note under a row says when another process
took a core during the p50/p99 calls: how many cores other processes kept busy during
each side's calls (/proc/stat), and how often tdsl's pool workers, not running during
their spins, slept between its parallel loops (tdsl.runtime.threadpool.stats); that
row's latencies are of a shared machine. The p99/p50 lines at the end are given twice: over
all calls, and over the calls in which no thread of the process waited for a core (Linux
schedstat run delay, or time off a CPU of a thread runnable throughout, under a tenth of
the median call: bench/latency.py), the tail on a machine of one's own; how many calls
that kept is printed beside. Beside tdsl's, under each row, the machine's floor
(bench/floor.py): a register-only loop on one thread and on two joined threads, and
8 chains of vector FMAs on one thread (the units a compute-bound kernel keeps busy, which a
core's sibling on the host can slow), calibrated to tdsl's median call and taken in turn
with the runtimes, so that its p99/p50 is the spread no runtime could beat on the machine
as it was then; the last lines name the models whose tail is above 1.2x where a floor's is
not. A second line under each row gives every side's median call by its place in the run
(the 2nd, 3rd, 4th call after the pause, then the later ones) over its p50, and its
p99/p50 over the calls from the 5th on: a slow start after an idle pause (caches, clock,
a vCPU the hypervisor wakes) shows there, in the runtimes and the floors alike.
The ratios are of the best blocks: tdsl over
onnxruntime, and tdsl over the faster of onnxruntime and OpenVINO. First the CPU and its
measured FMA peak; per model tdsl's share of that peak (conv/dense/matmul flops over its
latency; a conv's taps that read padding are not counted: both sides skip them in dilated
convs on small images). The last lines are the geometric means of the ratios and the
worst p99/p50 of tdsl.

With --int8 each model is first quantized by onnxruntime's quantizer (tdsl.graph.models.
quantize_qdq: uint8 activations, per-channel int8 weights, calibrated on two random
inputs) and compared with onnxruntime's int8 session and OpenVINO running the same QDQ
model (its low-precision transformations make its convolutions int8; a note says when it
ran none of them in int8); the error column is then in units of the output's
quantization step, and the peak share is of the integer dot-product peak (4 products per
float32 lane where the CPU has AVX512-VNNI).
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

import tdsl  # noqa: E402
import tdsl.graph as G  # noqa: E402
from tdsl.graph import zoo  # noqa: E402
from tdsl.examples import peak  # noqa: E402
from tdsl.graph import models  # noqa: E402
from tdsl.runtime import threadpool  # noqa: E402
from common import add_target_option, frozen_heap, print_target, target_from  # noqa: E402
from graph import _ort_session, flops  # noqa: E402
from latency import blocks, percentiles  # noqa: E402
import floor  # noqa: E402
import isa_cap  # noqa: E402
import ov_session  # noqa: E402
from ov_session import OVSession  # noqa: E402

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
    with frozen_heap():
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


def _sleep_share(before, after, spread):
    """The share of tdsl's parallel loops in the calls of `spread` after which the pool's
    workers slept (threadpool.stats), less the one sleep each worker takes in each pause
    between the runs of calls. On a quiet machine a few percent at most; a large share
    when another process takes a core, so that a worker is not running during its spin."""
    launches = after.get("launches", 0) - before.get("launches", 0)
    if not launches:
        return 0.0
    idle = after["workers"] * len(spread.firsts)
    slept = after["worker_sleeps"] - before["worker_sleeps"] - idle
    return max(slept, 0) / (launches * after["workers"])


def _ms(spread):
    return f"{spread.p50 * 1e3:.2f}/{spread.p99 * 1e3:.2f}"


def run_one(name, target, a, threads, peak, ov_version):
    int8 = a.int8
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
    scale = step or max(float(np.abs(ref).max()), 1e-30)
    err = float(np.abs(out - ref).max() / scale)
    fns = [lambda: exe.run(x), lambda: sess.run(None, feed)]
    ovs, notes = None, []
    if ov_version:
        try:
            ovs = OVSession(model, threads)
            ov_err = float(np.abs(ovs.run(x) - ref).max() / scale)
            fns.append(lambda: ovs.run(x))
            if ov_err > (2.0 if step else 1e-2):
                notes.append(f"OpenVINO's output differs from onnxruntime's by {ov_err:.3g}"
                             f"{' steps' if step else ' of its magnitude'}")
            if int8 and not ovs.int8_layers():
                notes.append("OpenVINO ran none of the quantized layers in int8 (its column: float)")
            wider = isa_cap.ov_note(isa_cap.ov_layer_isas(ovs.compiled), a.cap)
            if wider:
                notes.append(wider)
        except Exception as e:  # OpenVINO that cannot read or compile a model: two columns
            ovs = None
            notes.append(f"OpenVINO failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
    times = blocks(fns, a.number, a.repeat)
    before = threadpool.stats()
    # the machine's floor at tdsl's median, taken in turn with the runtimes (bench/floor.py)
    median = floor.run_median(fns[0])
    floor_fns = list(floor.callables(median)) + [floor.callables(median, "fma")[0]]
    spreads = percentiles(fns + floor_fns, calls=a.calls)
    after = threadpool.stats()
    spreads, floors = spreads[:len(fns)], spreads[len(fns):]
    slept = _sleep_share(before, after, spreads[0])
    others = [sp.others for sp in spreads]
    if slept > 0.1 or max(o or 0.0 for o in others) > 0.2:
        sides = "tdsl's, onnxruntime's" + (", OpenVINO's" if ovs else "")
        used = "/".join("?" if o is None else f"{o:.1f}" for o in others)
        tasks = after.get("tasks", 0) - before.get("tasks", 0)
        ran = (f", and ran {(after['worker_tasks'] - before['worker_tasks']) / tasks:.0%} of its "
               "loops' tasks (the caller the rest)") if tasks else ""
        notes.append(f"other processes kept {used} cores busy during {sides} calls, and tdsl's pool "
                     f"workers slept after {slept:.0%} of its parallel loops (not running during "
                     f"their spins){ran}: the latencies are of a shared machine")
    t_tdsl, t_ort = times[:2]
    t_ov = times[2] if ovs else float("nan")
    best = min(t_ort, t_ov) if ovs else t_ort
    share = work / t_tdsl / 1e9 / peak
    if a.cap and ovs and work / t_ov / 1e9 > 1.1 * peak:
        # no code of the capped ISA computes faster than its FMA peak: proof of wider layers
        # (a tenth over it, in case another job held a core while the peak was measured)
        notes.append(f"OpenVINO computed at {work / t_ov / 1e9 / peak:.0%} of the {a.cap} FMA peak: "
                     f"its column is not all {a.cap} code")
    err_txt = f"{err:6.0f} st" if step else f"{err:9.1e}"
    ov_cols = (f"{ovs.compile_s:6.2f}", f"{t_ov * 1e3:8.2f}", _ms(spreads[2])) if ovs else ("-", "-", "-")
    idle = "/".join(f"{s.idle * 1e3:.1f}" for s in spreads)
    print(f"{name:20s} {cold:7.1f} {warm:6.2f} {ort_init:6.2f} {ov_cols[0]:>6s} {len(exe.steps):4d} "
          f"{t_tdsl * 1e3:8.2f} {t_ort * 1e3:8.2f} {ov_cols[1]:>8s} {_ms(spreads[0]):>13s} "
          f"{_ms(spreads[1]):>13s} {ov_cols[2]:>13s} {idle:>15s} {t_tdsl / t_ort:6.2f}x "
          f"{t_tdsl / t_ov:6.2f}x {t_tdsl / best:6.2f}x {share:6.1%} {err_txt}", flush=True)
    print(f"{'':20s} p99/p50 (with no core wait, of how many calls): tdsl {_tail(spreads[0])}; the machine's floor, p50 "
          f"ms and p99/p50: one thread {floors[0].p50 * 1e3:.2f} {_tail(floors[0])}, two "
          f"{floors[1].p50 * 1e3:.2f} {_tail(floors[1])}; vector FMAs on one thread "
          f"{floors[2].p50 * 1e3:.2f} {_tail(floors[2])}")
    names = ["tdsl", "ort", "ov"][:len(spreads)] + ["floor one", "floor two", "fma one"]
    print(f"{'':20s} median call 2nd/3rd/4th/later after the pause over p50, and p99/p50 from the 5th on: "
          + "; ".join(f"{n} {'/'.join(f'{b:.2f}' for b in sp.by_place)} {sp.p99_settled / sp.p50:.2f}"
                      for n, sp in zip(names, spreads + floors)))
    for n in notes:
        print(f"{'':20s} note: {n}")
    if a.profile:
        time.sleep(0.3)   # the other runtimes' threads, still spinning after their last block, took a core
        exe.run(x)
        print(exe.profile_text(number=a.number, top=15))
    return t_tdsl / t_ort, t_tdsl / t_ov, t_tdsl / best, [(sp.p99 / sp.p50, sp.p99_kept / sp.p50_kept, sp.n_kept, len(sp.calls))
                                          for sp in spreads + floors]


def _tail(spread):
    return (f"{spread.p99 / spread.p50:.2f} ({spread.p99_kept / spread.p50_kept:.2f} of "
            f"{spread.n_kept})")


def _geomean(xs):
    return math.exp(sum(math.log(r) for r in xs) / len(xs))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated substrings of model names")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--number", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--calls", type=int, default=100, help="single calls per side for p50/p99")
    p.add_argument("--int8", action="store_true", help="each model quantized (QDQ) against onnxruntime's int8")
    p.add_argument("--dynamic", action="store_true",
                   help="symbolic batch (and sequence) sizes: built once, swept over sizes (bench/dynamic.py)")
    p.add_argument("--builds", action="store_true",
                   help="with --dynamic: only the builds, dynamic and static, each with a cold cache")
    p.add_argument("--native-refs", action="store_true",
                   help="with --mcpu for a narrower CPU: leave OpenVINO at the host's ISA (default: "
                        "capped at the build's, bench/isa_cap.py)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads of each runtime (default: the CPU's cores); on a machine other jobs "
                        "keep busy, 1 keeps their time slices from stalling a parallel loop")
    add_target_option(p)
    a = p.parse_args(argv)
    target = target_from(a)
    if a.threads:                             # tdsl's pool and its schedules' parallel loops
        os.environ["TDSL_NUM_THREADS"] = str(a.threads)
        target = tdsl.target.Target(f"llvm{f' -mcpu={a.mcpu}' if a.mcpu else ''} -num-cores={a.threads}")
    host = tdsl.target.Target.host()
    a.cap = "" if a.native_refs else isa_cap.cap_for(target, host)
    if a.dynamic:
        import dynamic
        print_target(target)
        names = [n for n in list(dynamic.HELPER) + list(zoo.MODELS)
                 if not a.only or any(s in n for s in a.only.split(","))]
        dynamic.main(names, target, a.number, a.repeat, builds_only=a.builds)
        return
    if a.cap:
        isa_cap.apply(a.cap)                  # before anything loads openvino
    threads = target.num_cores
    peak_gflops = print_target(target)
    per_fma = 4 if a.int8 and target.has_vnni else 1
    if per_fma > 1:
        print(f"int8 peak (vpdpbusd: 4 products a float32 lane): {per_fma * peak_gflops:.1f} GOP/s")
    ov_version = ov_session.available()
    for line in isa_cap.header(isa_cap.cap_for(target, host), a.native_refs,
                               f"{host.cpu}, {host.vector_bits}-bit vectors"):
        print(line)
    import onnxruntime
    print(f"onnxruntime {onnxruntime.__version__}" +
          (f", OpenVINO {ov_version} (CPU plugin, latency hint, f32)" if ov_version else "") +
          f" and tdsl: {threads} threads each")
    if not ov_version:
        print("OpenVINO is not installed (pip install openvino): its columns are left out")
    print()
    try:
        import torch  # noqa: F401
        exported = list(zoo.MODELS)
    except ImportError:
        print("torch is not installed: only the onnx.helper networks\n")
        exported = []
    names = [n for n in list(HELPER) + exported if not a.only or any(s in n for s in a.only.split(","))]
    print(f"{'':20s} {'build s':>7s} {'':>6s} {'':>6s} {'':>6s} {'':>4s} {'best block ms':>26s} "
          f"{'p50/p99 ms':>41s} {'idle ms':>15s} {'tdsl /':>6s} {'tdsl /':>7s} {'tdsl /':>7s}")
    print(f"{'model':20s} {'cold':>7s} {'warm':>6s} {'ort':>6s} {'ov':>6s} {'kern':>4s} {'tdsl':>8s} {'ort':>8s} "
          f"{'ov':>8s} {'tdsl':>13s} {'ort':>13s} {'ov':>13s} {'tdsl/ort/ov':>15s} {'ort':>7s} {'ov':>7s} {'best':>7s} "
          f"{'peak':>6s} {'max err':>9s}")
    rows, failed = [], []
    for name in names:
        try:
            rows.append((name,) + run_one(name, target, a, threads, per_fma * peak_gflops, ov_version))
        except Exception as e:  # a model that fails is reported and the list goes on
            failed.append(name)
            print(f"{name:20s} failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", flush=True)
    again = peak.measure(target)[0]
    if again > 1.05 * peak_gflops:
        print(f"\nnote: the FMA peak measured {again:.1f} GFLOP/s at the end (the machine was "
              f"busier at the start); shares above are of {peak_gflops:.1f}")
    if rows:
        done, to_ort, to_ov, to_best, spread = zip(*rows)
        at = f" ({host.vector_bits}-bit, not capped)" if a.cap else ""
        print(f"\ngeometric mean tdsl/onnxruntime{at} over {len(rows)} models: {_geomean(to_ort):.2f}x; "
              f"worst {max(to_ort):.2f}x" + (f"; failed: {', '.join(failed)}" if failed else ""))
        if ov_version:
            print(f"geometric mean tdsl/the faster of onnxruntime{at} and OpenVINO"
                  f"{f' (capped at {a.cap})' if a.cap else ''}: {_geomean(to_best):.2f}x; "
                  f"worst {max(to_best):.2f}x")
        ov_rows = [(n, r) for n, r in zip(done, to_ov) if not math.isnan(r)]
        if a.cap and ov_rows:
            wide = [f"{n} {r:.2f}x" for n, r in ov_rows if r > 1.2]
            print(f"geometric mean tdsl/OpenVINO capped at {a.cap}, like for like "
                  f"({len(ov_rows)} models): {_geomean([r for _, r in ov_rows]):.2f}x; "
                  f"above 1.2x: {', '.join(wide) or 'none'}")
        # each row's spreads: tdsl, onnxruntime, OpenVINO where it ran, and the floors last
        floors = ("the floor, one thread", "the floor, two threads", "the FMA floor, one thread")
        sides = [(k, side) for k, side in enumerate(("tdsl", "onnxruntime", "OpenVINO"))
                 if any(len(r) - len(floors) > k for r in spread)]
        for i, side in sides + [(k - len(floors), f) for k, f in enumerate(floors)]:
            mine = [(n, r[i]) for n, r in zip(done, spread) if i < 0 or len(r) - len(floors) > i]
            for k, calls in ((0, "all calls"), (1, "the calls in which no thread waited for a core")):
                wide = [n for n, r in mine if r[k] > 1.2]
                kept = sum(r[2] for _, r in mine), sum(r[3] for _, r in mine)
                print(f"{side} p99/p50 over {calls}" + (f" ({kept[0]} of {kept[1]})" if k else "") +
                      f": worst {max((r[k] for _, r in mine if r[k] == r[k]), default=float('nan')):.2f}x"
                      f"; above 1.2x on {len(wide)} of "
                      f"{len(mine)} models" + (f": {', '.join(wide)}" if i == 0 and wide else ""))
        for k, calls in ((0, "all calls"), (1, "the calls with no core wait")):
            # the floor is tight where pure spinning kept within 1.2x on one thread or two
            # (a runtime may run a call on either; a nan, no calls kept, is not tight)
            ours = [n for n, r in zip(done, spread)
                    if r[0][k] > 1.2 and (r[-3][k] <= 1.2 or r[-2][k] <= 1.2)]
            print(f"over {calls}, tdsl above 1.2x where a floor (one thread or two) is not: "
                  f"{len(ours)} of {len(done)} models" + (f": {', '.join(ours)}" if ours else ""))
            # a compute-bound network's kernels keep the FMA units busy: a core whose sibling
            # on the host does too runs them slower, which the scalar chain does not see
            ours = [n for n, r in zip(done, spread) if r[0][k] > 1.2 and r[-1][k] <= 1.2]
            print(f"over {calls}, tdsl above 1.2x where the FMA floor is not: "
                  f"{len(ours)} of {len(done)} models" + (f": {', '.join(ours)}" if ours else ""))


if __name__ == "__main__":
    main()
