"""The auto-scheduler against tdsl's hand schedules and numpy: `python bench/auto.py`
(`--mcpu haswell` builds for another CPU this machine can run; `--quick` smaller sizes).

Each row: one kernel, the auto schedule with no search (`tdsl.auto_schedule`), tdsl's hand
schedule where one exists (tdsl.examples), and the reference (the faster of numpy and
onnxruntime on the same op, on the target's core count), all measured in this run; then auto/hand and auto/reference. Rates are GFLOP/s
for contractions and GB/s (bytes read + written once) for the memory-bound kernels; each
time is the best of several repeats (the machine is shared: the best is the least noisy).
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


def best_time(fn, number=3, repeat=7):
    """The best of `repeat` timings of `number` calls, after a warm-up."""
    ts = timings(fn, number, repeat)
    return min(ts)


def run_tdsl(s, tensors, inputs, out_shape, ref):
    """Builds, checks against `ref`, returns (seconds, compile seconds)."""
    t0 = time.perf_counter()
    f = tdsl.build(s, tensors, target=TARGET)
    cs = time.perf_counter() - t0
    out = np.zeros(out_shape, dtype=np.float32)
    f(*inputs, out)
    if not np.allclose(out, ref, rtol=2e-3, atol=2e-3):
        raise SystemExit(f"WRONG result: max error {np.abs(out - ref).max()}")
    return best_time(lambda: f(*inputs, out)), cs


# --------------------------------------------------------------------------- onnxruntime

def ort_op(op, inputs, out_shape, **attrs):
    """A callable running one ONNX operator on `inputs` (numpy arrays, fed every call) with
    onnxruntime, on as many threads as the target has cores; None without onnxruntime."""
    try:
        import onnx
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


# --------------------------------------------------------------------------- definitions

def batch_matmul(B, M, K, N):
    X = tdsl.placeholder((B, M, K), name="X")
    Y = tdsl.placeholder((B, K, N), name="Y")
    k = tdsl.reduce_axis((0, K), name="k")
    Z = tdsl.compute((B, M, N), lambda b, i, j: tdsl.sum(X[b, i, k] * Y[b, k, j], axis=k), name="Z")
    return X, Y, Z


def depthwise(C, H, W):
    D = tdsl.placeholder((C, H, W), name="data")
    Wt = tdsl.placeholder((C, 3, 3), name="weight")
    pad = tdsl.compute((C, H + 2, W + 2), lambda c, y, x: tdsl.if_then_else(
        tdsl.all(y >= 1, y < H + 1, x >= 1, x < W + 1), D[c, y - 1, x - 1], tdsl.const(0, "float32")),
        name="pad")
    ky = tdsl.reduce_axis((0, 3), name="ky")
    kx = tdsl.reduce_axis((0, 3), name="kx")
    O = tdsl.compute((C, H, W), lambda c, y, x: tdsl.sum(pad[c, y + ky, x + kx] * Wt[c, ky, kx],
                                                          axis=[ky, kx]), name="dwconv")
    return D, Wt, O


def depthwise_ref(d, w):
    C, H, W = d.shape
    p = np.pad(d, ((0, 0), (1, 1), (1, 1)))
    out = np.zeros_like(d)
    for ky in range(3):
        for kx in range(3):
            out += p[:, ky:ky + H, kx:kx + W] * w[:, ky, kx][:, None, None]
    return out


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


def row_sum(M, N):
    X = tdsl.placeholder((M, N), name="X")
    k = tdsl.reduce_axis((0, N), name="k")
    return X, tdsl.compute((M,), lambda i: tdsl.sum(X[i, k], axis=k), name="rowsum")


# --------------------------------------------------------------------------- the table

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    p.add_argument("--only", default="", help="comma-separated kernel names (substrings)")
    p.add_argument("--explain", action="store_true", help="print each auto schedule's decisions")
    p.add_argument("--search", type=float, default=0.0, metavar="SECONDS",
                   help="also tune the auto-scheduler's parameters for this long per kernel "
                        "(tdsl.autotune.tune_auto_schedule; the issue's figure is 60)")
    add_target_option(p)
    opts = p.parse_args()
    global TARGET
    TARGET = target_from(opts)
    q = 4 if opts.quick else 1
    rng = np.random.default_rng(0)
    print("tdsl.auto_schedule (no search) vs tdsl's hand schedules vs numpy, same run\n")
    print_target(TARGET)
    tuned_col = f" {'tuned':>8s}" if opts.search else ""
    print(f"{'kernel':34s} {'auto':>8s}{tuned_col} {'hand':>8s} {'ref':>8s} {'unit':7s} {'ref is':11s} "
          f"{'auto/hand':>9s} {'auto/ref':>8s} {'compile_s':>9s}" + ("  tuned/hand tuned/ref" if opts.search else ""))

    def rnd(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    def row(name, unit, work, auto_def, hand, ref_fn, ref_name="numpy", ort_fn=None):
        if opts.only and not any(w in name for w in opts.only.split(",")):
            return
        outs, tensors, inputs, ref = auto_def()
        s = tdsl.auto_schedule(outs, target=TARGET)
        if opts.explain:
            print(s.explain())
        t_auto, cs = run_tdsl(s, tensors, inputs, ref.shape, ref)
        t_hand = None
        if hand is not None:
            hs, htensors, hinputs, href = hand()
            t_hand, _ = run_tdsl(hs, htensors, hinputs, href.shape, href)
        t_tuned = None
        if opts.search:
            from tdsl.autotune import tune_auto_schedule

            def definition():
                o, tens, _, _ = auto_def()
                return o, tens
            definition.__qualname__ = "bench_" + name.replace(" ", "_")
            ts, ttensors, _ = tune_auto_schedule(definition, (), target=TARGET, timeout_s=opts.search)
            t_tuned, _ = run_tdsl(ts, ttensors, inputs, ref.shape, ref)
        t_ref = best_time(ref_fn)
        if ort_fn is not None:
            t_ort = best_time(ort_fn)
            if t_ort < t_ref:
                t_ref, ref_name = t_ort, "onnxruntime"
        r = lambda t: work / t / 1e9  # noqa: E731
        hand_txt = f"{r(t_hand):8.1f}" if t_hand else f"{'-':>8s}"
        ratio_h = f"{t_hand / t_auto:9.2f}" if t_hand else f"{'-':>9s}"
        tuned_txt = f" {r(t_tuned):8.1f}" if t_tuned else ""
        extra = ""
        if t_tuned:
            extra = (f"  {t_hand / t_tuned:10.2f}" if t_hand else f"  {'-':>10s}") + f" {t_ref / t_tuned:9.2f}"
        print(f"{name:34s} {r(t_auto):8.1f}{tuned_txt} {hand_txt} {r(t_ref):8.1f} {unit:7s} {ref_name:11s} "
              f"{ratio_h} {t_ref / t_auto:8.2f} {cs:9.2f}{extra}", flush=True)

    # GEMM
    n = 1024 // q
    a, b = rnd(n, n), rnd(n, n)
    c = np.empty((n, n), np.float32)
    ref = a @ b

    def gemm_auto():
        A, B, C = gemm.definition(n, n, n)
        return C, [A, B, C], [a, b], ref

    def gemm_hand():
        s, t = gemm.register_blocked(n, n, n, target=TARGET)
        return s, t, [a, b], ref
    row(f"gemm {n}", "GFLOP/s", 2.0 * n ** 3, gemm_auto, gemm_hand, lambda: np.matmul(a, b, out=c),
        ort_fn=ort_op("MatMul", [a, b], (n, n)))

    # conv2d 3x3 64->64 56x56, NCHW[x]c (the hand schedule's definition)
    C, H, W, CO = 64, 56 // q, 56 // q, 64
    bn = kernels.conv_block(TARGET)
    d, w = rnd(C, H, W), rnd(CO, C, 3, 3)
    wp = kernels.pack_weight(w, bn)
    cref = kernels.conv2d_reference(d, w)
    cref_packed = np.ascontiguousarray(cref.reshape(CO // bn, bn, H, W).transpose(0, 2, 3, 1))

    def conv_auto():
        D, Wp, pad, O = kernels.conv2d_nchwc(C, H, W, CO, bn)
        return O, [D, Wp, O], [d, wp], cref_packed

    def conv_hand():
        s, t = kernels.conv2d_schedule(C, H, W, CO, target=TARGET)
        return s, t, [d, wp], cref_packed
    row(f"conv2d 3x3 {C}->{CO} {H}x{W}", "GFLOP/s", 2.0 * C * CO * 9 * H * W, conv_auto, conv_hand,
        lambda: kernels.conv2d_reference(d, w), "numpy im2col",
        ort_fn=ort_op("Conv", [d[None], w], (1, CO, H, W), pads=[1, 1, 1, 1]))

    # batch matmul
    bb, bm, bk, bnn = 16, 256 // q, 64, 256 // q
    x, y = rnd(bb, bm, bk), rnd(bb, bk, bnn)
    z = np.empty((bb, bm, bnn), np.float32)
    bref = x @ y

    def bmm_auto():
        X, Y, Z = batch_matmul(bb, bm, bk, bnn)
        return Z, [X, Y, Z], [x, y], bref
    row(f"batch matmul {bb}x{bm}x{bk}x{bnn}", "GFLOP/s", 2.0 * bb * bm * bk * bnn, bmm_auto, None,
        lambda: np.matmul(x, y, out=z), ort_fn=ort_op("MatMul", [x, y], (bb, bm, bnn)))

    # depthwise conv 3x3
    dc, dh = 32, 112 // q
    dd, dw = rnd(dc, dh, dh), rnd(dc, 3, 3)
    dref = depthwise_ref(dd, dw)

    def dw_auto():
        D, Wt, O = depthwise(dc, dh, dh)
        return O, [D, Wt, O], [dd, dw], dref
    row(f"depthwise conv 3x3 {dc}ch {dh}x{dh}", "GFLOP/s", 2.0 * dc * dh * dh * 9, dw_auto, None,
        lambda: depthwise_ref(dd, dw),
        ort_fn=ort_op("Conv", [dd[None], dw[:, None]], (1, dc, dh, dh), pads=[1, 1, 1, 1], group=dc))

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
    row(f"bias+relu {m}x{m}", "GB/s", 8.0 * m * m, br_auto, br_hand, br_np)   # (ORT: two ops)

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
    row(f"softmax {sm}x{sn}", "GB/s", 8.0 * sm * sn, sm_auto, sm_hand, lambda: kernels.softmax_reference(xs),
        ort_fn=ort_op("Softmax", [xs], (sm, sn), axis=1))

    # layernorm
    xl, gl, bl = rnd(sm, sn), rnd(sn), rnd(sn)
    lref = layernorm_ref(xl, gl, bl)

    def ln_auto():
        X, g, b_, Y = layernorm(sm, sn)
        return Y, [X, g, b_, Y], [xl, gl, bl], lref
    row(f"layernorm {sm}x{sn}", "GB/s", 8.0 * sm * sn, ln_auto, None, lambda: layernorm_ref(xl, gl, bl),
        ort_fn=ort_op("LayerNormalization", [xl, gl, bl], (sm, sn), axis=-1, epsilon=1e-5))

    # row sum
    rm = 8192 // q
    xr = rnd(rm, rm)
    rref = xr.sum(axis=1)
    rs = np.empty(rm, np.float32)

    def rs_auto():
        X, R = row_sum(rm, rm)
        return R, [X, R], [xr], rref
    row(f"row sum {rm}x{rm}", "GB/s", 4.0 * rm * rm, rs_auto, None, lambda: np.sum(xr, axis=1, out=rs),
        ort_fn=ort_op("ReduceSum", [xr, np.array([1], np.int64)], (rm,), keepdims=0))


if __name__ == "__main__":
    main()
