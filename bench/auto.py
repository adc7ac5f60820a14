"""The auto-scheduler against tdsl's hand schedules and numpy: `python bench/auto.py`
(`--mcpu haswell` builds for another CPU this machine can run; `--quick` smaller sizes).

Each row: one kernel, the auto schedule with no search (`tdsl.auto_schedule`), tdsl's hand
schedule where one exists (tdsl.examples), and the reference (the fastest of numpy,
onnxruntime and torch on the same op, each on the target's core count), all measured in this
run; then auto/hand and auto/reference. Rates are GFLOP/s for contractions and GB/s (bytes
read + written once) for the memory-bound kernels. Each side is timed in blocks
(common.timings: a pause, a warm-up, then a block of calls), in three rounds that interleave
all sides of a row; the best block counts. The pause lets onnxruntime's and torch's worker
threads stop spinning before the next side runs; the rounds spread a burst of another job
on a shared machine over all sides. Memory-bound rows (GB/s) get nine rounds, and each
round is read as a comparison of its own: on a shared machine the memory bandwidth swings
for seconds at a time (a row sum of 8192^2 reads 34 or 60 GB/s for every side alike), so
the best of a few rounds says which side met the fast spell, not which code is faster.
Their rates are each side's median round, and auto/ref is the median over rounds of the
fastest reference's time in that round over auto's (`summarize`).

The rows: GEMM 64-2048; every distinct convolution of ResNet-18 and the MobileNetV2 kinds
(3x3 stride 1 and 2, 1x1, depthwise 3x3 stride 1 and 2), NCHW input with weights pre-packed
to NCHW[x]c as a graph compiler does once; batch matmul; bias+relu; softmax; layer norm;
row sums.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import add_target_option, print_target, target_from, timings  # noqa: E402

import tdsl  # noqa: E402
from tdsl.examples import gemm, kernels  # noqa: E402

TARGET = None


ROUNDS = 3        # every side of a row is timed once per round, the rounds interleaved
MEMORY_ROUNDS = 9  # for the memory-bound rows
PAUSE_S = 0.1     # before each block: onnxruntime's and torch's idle threads stop spinning


def round_times(calls, rounds=ROUNDS):
    """{name: [seconds per call, one per round]} over `rounds` interleaved rounds; in each
    round every callable gets a pause, a warm-up and a block of timed calls
    (common.timings), and its best timing counts."""
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            time.sleep(PAUSE_S)
            times[name].append(min(timings(fn, 3, 5)))
    return times


def summarize(times, refs, paired):
    """(seconds per call for each side, the reference's name, its seconds per call).

    Compute-bound rows (paired=False): each side's best round, and the fastest reference.
    Memory-bound rows (paired=True): the bandwidth swings between rounds for every side
    alike, so each round is a comparison of its own; a side's figure is its median round,
    and the reference's is the auto side's median round scaled by the median over rounds
    of (fastest reference in that round / auto in that round). The best of several
    sides' best rounds would favour whichever side met a fast spell, and the more
    references, the more of them get a chance."""
    ref_keys = ["ref " + k for k in refs if "ref " + k in times]
    if not paired:
        best = {k: min(v) for k, v in times.items()}
        key = min(ref_keys, key=best.get, default=None)
        return best, key and key[4:], key and best[key]
    med = {k: float(np.median(v)) for k, v in times.items()}
    if not ref_keys:
        return med, None, None
    per_round = [min((times[k][i], k) for k in ref_keys) for i in range(len(times["auto"]))]
    ratio = float(np.median([t / a for (t, _), a in zip(per_round, times["auto"])]))
    names = [k for _, k in per_round]
    key = max(set(names), key=names.count)
    return med, key[4:], ratio * med["auto"]


def run_tdsl(s, tensors, inputs, out_shape, ref):
    """Builds, checks against `ref`, returns (compile seconds, the call to time)."""
    t0 = time.perf_counter()
    f = tdsl.build(s, tensors, target=TARGET)
    cs = time.perf_counter() - t0
    out = np.zeros(out_shape, dtype=np.float32)
    f(*inputs, out)
    if not np.allclose(out, ref, rtol=2e-3, atol=2e-3):
        raise SystemExit(f"WRONG result: max error {np.abs(out - ref).max()}")
    return cs, lambda: f(*inputs, out)


# --------------------------------------------------------------------------- onnxruntime

def ort_op(op, inputs, out_shape, **attrs):
    """A callable running one ONNX operator on `inputs` (numpy arrays, fed every call) with
    onnxruntime, on as many threads as the target has cores; None without onnxruntime."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                         for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = TARGET.num_cores
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = dict(zip(names, inputs))
    sess.run(None, feeds)
    return lambda: sess.run(None, feeds)


def torch_op(fn, *inputs):
    """A callable running `fn` on torch views of `inputs` (numpy arrays, no copies) on as many
    threads as the target has cores; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(TARGET.num_cores)
    ts = [torch.from_numpy(a) for a in inputs]

    def call():
        with torch.no_grad():
            return fn(*ts)
    call()
    return call


# --------------------------------------------------------------------------- definitions

def batch_matmul(B, M, K, N):
    X = tdsl.placeholder((B, M, K), name="X")
    Y = tdsl.placeholder((B, K, N), name="Y")
    k = tdsl.reduce_axis((0, K), name="k")
    Z = tdsl.compute((B, M, N), lambda b, i, j: tdsl.sum(X[b, i, k] * Y[b, k, j], axis=k), name="Z")
    return X, Y, Z


def layernorm(M, N, eps=1e-5):
    X = tdsl.placeholder((M, N), name="X")
    g = tdsl.placeholder((N,), name="gamma")
    b = tdsl.placeholder((N,), name="beta")
    k1 = tdsl.reduce_axis((0, N), name="k1")
    k2 = tdsl.reduce_axis((0, N), name="k2")
    s1 = tdsl.compute((M,), lambda i: tdsl.sum(X[i, k1], axis=k1), name="rowsum")
    s2 = tdsl.compute((M,), lambda i: tdsl.sum((X[i, k2] - s1[i] / N) * (X[i, k2] - s1[i] / N), axis=k2),
                      name="sqsum")
    Y = tdsl.compute((M, N), lambda i, j: (X[i, j] - s1[i] / N) * tdsl.rsqrt(s2[i] / N + eps) * g[j] + b[j],
                     name="Y")
    return X, g, b, Y


def layernorm_ref(x, g, b, eps=1e-5):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


# --------------------------------------------------------------------------- the table

# (C, H=W, CO, kernel, stride, pad): every distinct convolution of ResNet-18 at 224x224
RESNET18 = [(3, 224, 64, 7, 2, 3), (64, 56, 64, 3, 1, 1), (64, 56, 128, 3, 2, 1), (64, 56, 128, 1, 2, 0),
            (128, 28, 128, 3, 1, 1), (128, 28, 256, 3, 2, 1), (128, 28, 256, 1, 2, 0),
            (256, 14, 256, 3, 1, 1), (256, 14, 512, 3, 2, 1), (256, 14, 512, 1, 2, 0),
            (512, 7, 512, 3, 1, 1)]
# MobileNetV2's kinds: the 3x3 stride-2 stem, 1x1 expansions and projections
MOBILENET_V2 = [(3, 224, 32, 3, 2, 1), (32, 112, 16, 1, 1, 0), (16, 112, 96, 1, 1, 0),
                (24, 56, 144, 1, 1, 0), (144, 28, 32, 1, 1, 0), (384, 14, 64, 1, 1, 0),
                (320, 7, 1280, 1, 1, 0)]
# its depthwise 3x3 convolutions: (channels, H=W, stride)
DEPTHWISE = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (384, 14, 1), (960, 7, 1)]
QUICK_CONV = [(64, 14, 64, 3, 1, 1), (64, 28, 128, 3, 2, 1), (64, 28, 128, 1, 2, 0), (16, 28, 96, 1, 1, 0)]
QUICK_DEPTHWISE = [(32, 28, 1), (96, 28, 2)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="fewer and smaller sizes, for a smoke test")
    p.add_argument("--only", default="", help="comma-separated kernel names (substrings)")
    p.add_argument("--explain", action="store_true", help="print each auto schedule's decisions")
    p.add_argument("--search", type=float, default=0.0, metavar="SECONDS",
                   help="also tune the auto-scheduler's parameters for this long per kernel "
                        "(tdsl.autotune.tune_auto_schedule; the issue's figure is 60)")
    add_target_option(p)
    opts = p.parse_args()
    global TARGET
    TARGET = target_from(opts)
    quick = opts.quick
    rng = np.random.default_rng(0)
    print("tdsl.auto_schedule (no search) vs tdsl's hand schedules vs numpy/onnxruntime/torch, "
          "same run\n")
    print_target(TARGET)
    tuned_col = f" {'tuned':>8s}" if opts.search else ""
    print(f"{'kernel':34s} {'auto':>8s}{tuned_col} {'hand':>8s} {'ref':>8s} {'unit':7s} {'ref is':11s} "
          f"{'auto/hand':>9s} {'auto/ref':>8s} {'compile_s':>9s}" + ("  tuned/hand tuned/ref" if opts.search else ""))
    ratios = {"hand": [], "ref": []}

    def rnd(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    def row(name, unit, work, auto_def, hand, refs):
        """refs: {name: callable or None}; the fastest is the reference."""
        if opts.only and not any(w in name for w in opts.only.split(",")):
            return
        outs, tensors, inputs, ref = auto_def()
        s = tdsl.auto_schedule(outs, target=TARGET)
        if opts.explain:
            print(s.explain())
        cs, auto_call = run_tdsl(s, tensors, inputs, ref.shape, ref)
        calls = {"auto": auto_call}
        if hand is not None:
            hs, htensors, hinputs, href = hand()
            calls["hand"] = run_tdsl(hs, htensors, hinputs, href.shape, href)[1]
        if opts.search:
            from tdsl.autotune import tune_auto_schedule

            def definition():
                o, tens, _, _ = auto_def()
                return o, tens
            definition.__qualname__ = "bench_" + name.replace(" ", "_")
            ts, ttensors, _ = tune_auto_schedule(definition, (), target=TARGET, timeout_s=opts.search)
            calls["tuned"] = run_tdsl(ts, ttensors, inputs, ref.shape, ref)[1]
        calls.update({"ref " + k: fn for k, fn in refs.items() if fn is not None})
        memory = unit == "GB/s"
        best, ref_name, t_ref = summarize(round_times(calls, MEMORY_ROUNDS if memory else ROUNDS),
                                          refs, paired=memory)
        ref_name = ref_name or "-"
        t_auto, t_hand, t_tuned = best["auto"], best.get("hand"), best.get("tuned")
        r = lambda t: work / t / 1e9  # noqa: E731
        hand_txt = f"{r(t_hand):8.1f}" if t_hand else f"{'-':>8s}"
        ratio_h = f"{t_hand / t_auto:9.2f}" if t_hand else f"{'-':>9s}"
        ref_txt = f"{r(t_ref):8.1f}" if t_ref else f"{'-':>8s}"
        ratio_r = f"{t_ref / t_auto:8.2f}" if t_ref else f"{'-':>8s}"
        if t_hand:
            ratios["hand"].append(t_hand / t_auto)
        if t_ref:
            ratios["ref"].append(t_ref / t_auto)
        tuned_txt = f" {r(t_tuned):8.1f}" if t_tuned else ""
        extra = ""
        if t_tuned:
            extra = (f"  {t_hand / t_tuned:10.2f}" if t_hand else f"  {'-':>10s}") + \
                (f" {t_ref / t_tuned:9.2f}" if t_ref else "")
        print(f"{name:34s} {r(t_auto):8.1f}{tuned_txt} {hand_txt} {ref_txt} {unit:7s} {ref_name:11s} "
              f"{ratio_h} {ratio_r} {cs:9.2f}{extra}", flush=True)

    # GEMM
    for n in ((64, 256) if quick else (64, 128, 256, 512, 1024, 2048)):
        a, b = rnd(n, n), rnd(n, n)
        c = np.empty((n, n), np.float32)
        ref = a @ b

        def gemm_auto(n=n, a=a, b=b, ref=ref):
            A, B, C = gemm.definition(n, n, n)
            return C, [A, B, C], [a, b], ref

        def gemm_hand(n=n, a=a, b=b, ref=ref):
            s, t = gemm.register_blocked(n, n, n, target=TARGET)
            return s, t, [a, b], ref
        row(f"gemm {n}", "GFLOP/s", 2.0 * n ** 3, gemm_auto, gemm_hand,
            {"numpy": lambda a=a, b=b, c=c: np.matmul(a, b, out=c),
             "onnxruntime": ort_op("MatMul", [a, b], (n, n)),
             "torch": torch_op(lambda x, y: x @ y, a, b)})

    # convolutions, NCHW[x]c: the hand schedule exists for 3x3 stride 1
    for (C, H, CO, k, st, pd) in (QUICK_CONV if quick else RESNET18 + MOBILENET_V2):
        lanes = TARGET.vector_lanes("float32")
        bn = next(d for d in range(lanes, 0, -1) if CO % d == 0)
        d, w = rnd(C, H, H), rnd(CO, C, k, k) * np.float32(1 / np.sqrt(C * k * k))
        wp = kernels.pack_weight(w, bn)
        cref = kernels.conv_reference(d, w, st, pd)
        OH = cref.shape[1]
        cref_packed = np.ascontiguousarray(cref.reshape(CO // bn, bn, OH, OH).transpose(0, 2, 3, 1))

        def conv_auto(C=C, H=H, CO=CO, k=k, st=st, pd=pd, bn=bn, d=d, wp=wp, cref_packed=cref_packed):
            D, Wp, O = kernels.conv_nchwc(C, H, H, CO, k, st, pd, bn)
            return O, [D, Wp, O], [d, wp], cref_packed
        hand = None
        if (k, st, pd) == (3, 1, 1) and bn == kernels.conv_block(TARGET):
            def hand(C=C, H=H, CO=CO, d=d, wp=wp, cref_packed=cref_packed):
                s, t = kernels.conv2d_schedule(C, H, H, CO, target=TARGET)
                return s, t, [d, wp], cref_packed
        row(f"conv {k}x{k}/{st} {C}->{CO} {H}x{H}", "GFLOP/s", 2.0 * C * CO * k * k * OH * OH, conv_auto, hand,
            {"onnxruntime": ort_op("Conv", [d[None], w], (1, CO, OH, OH), pads=[pd] * 4, strides=[st, st]),
             "torch": torch_op(lambda x, y, st=st, pd=pd: torch_conv(x[None], y, st, pd), d, w)})

    for (C, H, st) in (QUICK_DEPTHWISE if quick else DEPTHWISE):
        dd, dw = rnd(C, H, H), rnd(C, 3, 3)
        dref = kernels.depthwise3x3_reference(dd, dw, st)
        OH = dref.shape[1]

        def dw_auto(C=C, H=H, st=st, dd=dd, dw=dw, dref=dref):
            D, Wt, O = kernels.depthwise3x3(C, H, H, st)
            return O, [D, Wt, O], [dd, dw], dref
        row(f"depthwise 3x3/{st} {C}ch {H}x{H}", "GFLOP/s", 2.0 * C * OH * OH * 9, dw_auto, None,
            {"onnxruntime": ort_op("Conv", [dd[None], dw[:, None]], (1, C, OH, OH), pads=[1] * 4,
                                   strides=[st, st], group=C),
             "torch": torch_op(lambda x, y, st=st, C=C: torch_conv(x[None], y[:, None], st, 1, C), dd, dw)})

    # batch matmul
    q = 4 if quick else 1
    bb, bm, bk, bnn = 16, 256 // q, 64, 256 // q
    x, y = rnd(bb, bm, bk), rnd(bb, bk, bnn)
    z = np.empty((bb, bm, bnn), np.float32)
    bref = x @ y

    def bmm_auto():
        X, Y, Z = batch_matmul(bb, bm, bk, bnn)
        return Z, [X, Y, Z], [x, y], bref
    row(f"batch matmul {bb}x{bm}x{bk}x{bnn}", "GFLOP/s", 2.0 * bb * bm * bk * bnn, bmm_auto, None,
        {"numpy": lambda: np.matmul(x, y, out=z), "onnxruntime": ort_op("MatMul", [x, y], (bb, bm, bnn)),
         "torch": torch_op(lambda u, v: u @ v, x, y)})

    # bias + relu
    m = 4096 // q
    xb, bb_ = rnd(m, m), rnd(m)
    brref = kernels.bias_relu_reference(xb, bb_)
    ob = np.empty_like(xb)

    def br_auto():
        X, bvec, Y = kernels.bias_relu(m, m)
        return Y, [X, bvec, Y], [xb, bb_], brref

    def br_hand():
        s, t = kernels.bias_relu_schedule(m, m, target=TARGET)
        return s, t, [xb, bb_], brref

    def br_np():
        np.add(xb, bb_, out=ob)
        np.maximum(ob, 0, out=ob)
    row(f"bias+relu {m}x{m}", "GB/s", 8.0 * m * m, br_auto, br_hand,
        {"numpy": br_np, "torch": torch_op(lambda u, v: (u + v).relu_(), xb, bb_)})

    # softmax
    sm, sn = 4096 // q, 1024
    xs = rnd(sm, sn)
    sref = kernels.softmax_reference(xs)

    def sm_auto():
        X, mx, ex, ssum, Y = kernels.softmax(sm, sn)
        return Y, [X, Y], [xs], sref

    def sm_hand():
        s, t = kernels.softmax_schedule(sm, sn, target=TARGET)
        return s, t, [xs], sref
    row(f"softmax {sm}x{sn}", "GB/s", 8.0 * sm * sn, sm_auto, sm_hand,
        {"numpy": lambda: kernels.softmax_reference(xs), "onnxruntime": ort_op("Softmax", [xs], (sm, sn), axis=1),
         "torch": torch_op(lambda u: u.softmax(1), xs)})

    # layernorm
    xl, gl, bl = rnd(sm, sn), rnd(sn), rnd(sn)
    lref = layernorm_ref(xl, gl, bl)

    def ln_auto():
        X, g, b_, Y = layernorm(sm, sn)
        return Y, [X, g, b_, Y], [xl, gl, bl], lref
    row(f"layernorm {sm}x{sn}", "GB/s", 8.0 * sm * sn, ln_auto, None,
        {"numpy": lambda: layernorm_ref(xl, gl, bl),
         "onnxruntime": ort_op("LayerNormalization", [xl, gl, bl], (sm, sn), axis=-1, epsilon=1e-5),
         "torch": torch_op(lambda u, g_, b_: torch_layer_norm(u, g_, b_), xl, gl, bl)})

    # row sums
    for rm in ((2048,) if quick else (2048, 8192)):
        xr = rnd(rm, rm)
        rref = xr.sum(axis=1)
        rs = np.empty(rm, np.float32)

        def rs_auto(rm=rm, xr=xr, rref=rref):
            X, R = kernels.row_sum(rm, rm)
            return R, [X, R], [xr], rref
        row(f"row sum {rm}x{rm}", "GB/s", 4.0 * rm * rm, rs_auto, None,
            {"numpy": lambda xr=xr, rs=rs: np.sum(xr, axis=1, out=rs),
             "onnxruntime": ort_op("ReduceSum", [xr, np.array([1], np.int64)], (rm,), keepdims=0),
             "torch": torch_op(lambda u: u.sum(1), xr)})

    geo = {k: float(np.exp(np.mean(np.log(v)))) if v else None for k, v in ratios.items()}
    print(f"\ngeometric mean: auto/hand {geo['hand'] or 0:.2f} over {len(ratios['hand'])} rows, "
          f"auto/ref {geo['ref'] or 0:.2f} over {len(ratios['ref'])} rows; worst auto/hand "
          f"{min(ratios['hand'], default=0):.2f}")


def torch_conv(x, w, stride, pad, groups=1):
    import torch.nn.functional as F
    return F.conv2d(x, w, stride=stride, padding=pad, groups=groups)


def torch_layer_norm(x, g, b):
    import torch.nn.functional as F
    return F.layer_norm(x, (x.shape[-1],), g, b, 1e-5)


if __name__ == "__main__":
    main()
