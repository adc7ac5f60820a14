"""Command line: `python -m tdsl demo|compile|cache` (also the `tdsl` console script)."""
from __future__ import annotations

import argparse
import sys
import time


def demo(size=1024, target="llvm"):
    import tdsl
    from tdsl import tiling
    from tdsl.examples import gemm, peak

    tgt = tdsl.target.Target(target)
    if tgt.is_gpu:
        from tdsl.examples import gpu_demo
        return gpu_demo.demo(size, tgt)
    M = N = K = size
    print(f"tdsl {tdsl.__version__}: a {M}x{N}x{K} float32 matmul, defined, scheduled, built and checked\n")
    print("target:")
    print(tgt.describe())
    mr, nr = tiling.gemm_tile(tgt, M, N)
    print(f"register tile: {mr} x {nr} floats ({mr * nr // tgt.vector_lanes()} vector accumulators "
          f"of {tgt.vector_registers} registers)\n")
    t0 = time.perf_counter()
    s, args = gemm.register_blocked(M, N, K, target=tgt)
    print("schedule:")
    print(s)
    func = tdsl.lower(s, args, name="matmul")
    print("\nloop IR:")
    print(func)
    f = tdsl.build(s, args, target=tgt, name="matmul")
    build_s = time.perf_counter() - t0

    a, b, c, ok, err = gemm.run_checked(f, M, N, K)
    t = f.time_evaluator(number=5, repeat=5)(a, b, c).median
    tn = gemm.numpy_seconds(a, b, c)
    flops = 2.0 * M * N * K
    print(f"\ncorrect: {ok} (max relative error {err:.2e})")
    print(f"build (define to callable): {build_s:.3f} s")
    print(f"{'':8s}{'GFLOP/s':>10s}")
    fma_peak = peak.measure(tgt)[0]
    print(f"{'tdsl':8s}{flops / t / 1e9:10.1f}")
    print(f"{'numpy':8s}{flops / tn / 1e9:10.1f}")
    print(f"{'FMA peak':8s}{fma_peak:10.1f}   (measured on this machine for {tgt.cpu})")
    print(f"ratio tdsl/numpy: {tn / t:.2f}; share of the FMA peak: {flops / t / 1e9 / fma_peak:.0%}")
    return 0 if ok else 1


def _parse_dims(text):
    """"batch=1,sequence=128" -> {"batch": 1, "sequence": 128}"""
    from tdsl.errors import GraphError
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        name, eq, val = part.partition("=")
        try:
            out[name.strip()] = int(val)
        except ValueError:
            raise GraphError(f"--dims: '{part}' is not NAME=SIZE") from None
        if not eq or not name.strip():
            raise GraphError(f"--dims: '{part}' is not NAME=SIZE")
    return out


def compile_model(path, target="llvm", number=10, dims=None):
    """`tdsl compile MODEL.onnx`: the graph before and after optimization, a run on random
    input, a comparison with onnxruntime when it is installed, and both latencies.
    `dims` ("batch=1,sequence=128") sizes the model's symbolic input dimensions; those
    left without one stay symbolic: the network is built once and run at two sizes."""

    import tdsl.graph as G
    from tdsl.errors import TdslError

    try:
        mod = G.from_onnx(path, dims=_parse_dims(dims))
        print("== imported ==")
        print(mod)
        opt = G.optimize(mod, target=target)
        print("\n== optimized ==")
        print(opt)
        t0 = time.perf_counter()
        exe = G.build(opt, target=target)
        build_s = time.perf_counter() - t0
    except TdslError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"\nbuild: {build_s:.2f} s, {len(exe.steps)} kernels ({exe.stats['compiled']} compiled)")
    binder = exe.binder
    # a network with symbolic sizes (no --dims) runs at two sets of them, built once
    runs = [{}] if binder is None else [
        {n: 1 for n in binder.names},
        {n: min(8, binder.bounds.get(n, (1, 8))[1]) for n in binder.names}]
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except ImportError:
        sess = None
        print("onnxruntime is not installed: no comparison")
    ok = True
    for sizes in runs:
        if sizes:
            print("\nat " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
        ok &= _run_and_compare(exe, opt, mod, sess, sizes, number)
    return 0 if ok else 1


def _run_and_compare(exe, opt, mod, sess, sizes, number):
    """One run of `exe` at `sizes` on random input, beside onnxruntime's `sess`."""
    import numpy as np

    from tdsl.graph.ir.dims import evaluate_shape
    rng = np.random.default_rng(0)
    feeds = {}
    for p in opt.main.params:
        t = p.type
        shape = evaluate_shape(t.shape, sizes)
        feeds[p.name] = (rng.standard_normal(shape).astype(t.dtype) if t.dtype.startswith("float")
                         else rng.integers(0, 2, shape).astype(t.dtype))
    outs = exe.run(**feeds)
    t_tdsl = exe.benchmark(number=number, repeat=3)["median"]
    print(f"peak intermediate memory {exe.peak_memory_bytes / 2**20:.2f} MiB")
    print(f"tdsl latency:        {t_tdsl * 1e3:9.3f} ms")
    if sess is None:
        return True
    names = mod.info.get("input_names", {})
    ort_feeds = {names.get(k, k): v for k, v in feeds.items()}
    refs = sess.run(None, ort_feeds)
    ok = True
    for i, (o, r) in enumerate(zip(outs, refs)):
        err = float(np.abs(o - r).max() / max(float(np.abs(r).max()), 1e-30)) if o.size else 0.0
        good = o.shape == r.shape and np.allclose(o, r, rtol=1e-4, atol=1e-4 * max(float(np.abs(r).max()), 1e-30))
        ok &= good
        print(f"output {i}: max relative difference {err:.2e} ({'ok' if good else 'MISMATCH'})")
    sess.run(None, ort_feeds)
    t0 = time.perf_counter()
    for _ in range(number):
        sess.run(None, ort_feeds)
    t_ort = (time.perf_counter() - t0) / number
    print(f"onnxruntime latency: {t_ort * 1e3:9.3f} ms (tdsl/onnxruntime {t_tdsl / t_ort:.2f}x)")
    return ok


def cache_command(action):
    """`tdsl cache info` prints where the compile cache is and what it holds; `tdsl cache
    clear` empties it."""
    from tdsl.runtime import diskcache
    if action == "clear":
        n = diskcache.clear()
        print(f"removed {n} entries from {diskcache.directory()}")
        return 0
    i = diskcache.info()
    state = "on" if i["enabled"] else "off (TDSL_CACHE=0)"
    print(f"compile cache: {i['directory']} ({state})")
    print(f"{i['entries']} entries, {i['bytes'] / 2**20:.1f} MiB of at most "
          f"{i['max_bytes'] / 2**20:.0f} MiB (TDSL_CACHE_MAX_MB)")
    for kind, (n, b) in sorted(i["kinds"].items()):
        print(f"  {kind:12s} {n:6d} entries {b / 2**20:9.2f} MiB")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="tdsl", description="tdsl: a Python-embedded tensor compiler")
    sub = p.add_subparsers(dest="cmd")
    d = sub.add_parser("demo", help="build a scheduled matmul, check it against numpy, time it")
    d.add_argument("--size", type=int, default=1024)
    d.add_argument("--target", default="llvm", help="e.g. 'llvm -mcpu=haswell' (must run here); "
                   "'cuda' or 'opencl' build the GPU schedule and run it where the device exists")
    c = sub.add_parser("compile", help="import an ONNX model, optimize, build, run and compare with onnxruntime")
    c.add_argument("model")
    c.add_argument("--target", default="llvm")
    c.add_argument("--dims", default="", help="sizes of symbolic input dimensions, e.g. batch=1,sequence=128")
    k = sub.add_parser("cache", help="the persistent compile cache: where it is, what it holds; clear it")
    k.add_argument("action", choices=["info", "clear"])
    args = p.parse_args(argv)
    if args.cmd == "demo":
        return demo(args.size, args.target)
    if args.cmd == "compile":
        return compile_model(args.model, args.target, dims=args.dims)
    if args.cmd == "cache":
        return cache_command(args.action)
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
