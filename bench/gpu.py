"""The GPU suite: tdsl beside torch (TF32 off) in the same run, on a CUDA GPU.

    python bench/gpu.py [--quick] [--number 20]
    python bench/gpu.py --sanitize [pytest args]

Rows: hand SGEMM (tdsl.examples.gpu.matmul_fast_schedule) and auto-scheduled GEMM at 1024
and 4096; the auto-scheduled bfloat16 GEMM (float32 accumulators, the tensor cores:
tdsl.autosched.gpu_tensorize) beside torch's bfloat16 matmul at 1024 and 4096, and on
sm_90 the warpgroup-MMA schedule (examples/wgmma_gemm) at 4096; auto-scheduled (`tdsl.auto_schedule`, no schedule written) the ResNet conv layer
(3x3 64->64 56x56 batch 8), row sum 8192x8192, softmax 16384x1024 and add of 64M floats; and ResNet-18 and MobileNetV2 through the graph executor at
batch 1 and 8 (torchvision models exported by tdsl.graph.zoo; tdsl.graph.models' own
ResNet-18 and MobileNetV2 blocks when torch is missing). Each side is timed in blocks
(warm-up, N calls, one wait): kernels by device events, networks by wall time of a whole
inference. Prints TFLOP/s (GB/s for memory-bound rows) and tdsl's speed as a share of
torch's.

With no GPU it prints "no GPU" and runs the compile-only checks: every row's kernels are
built for cuda (PTX through NVRTC) and reports ptxas's registers, spills, shared memory and
occupancy on sm_90 (`module.resources`). `--quick` checks the networks at
batch 1 only.

`--sanitize` runs the tests that launch CUDA kernels (`SANITIZE_TESTS`, or the pytest
arguments given after it) under `compute-sanitizer --tool memcheck` and prints its
summary; it exits 1 when memcheck reports an error or a test fails. With no GPU it says
so and exits 0.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl  # noqa: E402
from tdsl.examples import gpu as ex, kernels  # noqa: E402


# ------------------------------------------------------------------------- the rows

class Row:
    """name; build() -> (tdsl module, (shape, dtype) of each argument); work (flops or bytes) and
    unit; torch(t, dev) -> a no-argument callable computing the same on the GPU."""

    def __init__(self, name, build, work, unit, torch_fn):
        self.name, self.build, self.work, self.unit, self.torch = name, build, work, unit, torch_fn


def _gemm_auto(n, params=None):
    A = tdsl.placeholder((n, n), name="A")
    B = tdsl.placeholder((n, n), name="B")
    k = tdsl.reduce_axis((0, n), name="k")
    C = tdsl.compute((n, n), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tdsl.auto_schedule(C, target="cuda", params=params), [A, B, C]


def _gemm_bf16_auto(n):
    from tdsl.examples import mma_gemm
    A, B, C = mma_gemm.definition(n, n, n, "bfloat16")
    return tdsl.auto_schedule(C, target="cuda"), [A, B, C]


def _gemm_bf16_wgmma(n):
    from tdsl.examples import wgmma_gemm
    return wgmma_gemm.schedule(n, n, n, "bfloat16", warpgroups=2, n_blocks=2, stages=4)


def _conv_auto(N, C, H, W, F, params=None):
    """The ResNet layer as the issue times it: 3x3, the input already padded (torch pads)."""
    X = tdsl.placeholder((N, C, H + 2, W + 2), name="X")
    Wt = tdsl.placeholder((F, C, 3, 3), name="Wt")
    c, dy, dx = (tdsl.reduce_axis((0, e), name=nm) for e, nm in ((C, "c"), (3, "dy"), (3, "dx")))
    Y = tdsl.compute((N, F, H, W), lambda n, f, y, x: tdsl.sum(
        X[n, c, y + dy, x + dx] * Wt[f, c, dy, dx], axis=[c, dy, dx]), name="Y")
    return tdsl.auto_schedule(Y, target="cuda", params=params), [X, Wt, Y]


def _rowsum_auto(M, N):
    A = tdsl.placeholder((M, N), name="A")
    k = tdsl.reduce_axis((0, N), name="k")
    B = tdsl.compute((M,), lambda i: tdsl.sum(A[i, k], axis=k), name="B")
    return tdsl.auto_schedule(B, target="cuda"), [A, B]


def _softmax_auto(M, N):
    X, _, _, _, Y = kernels.softmax(M, N)
    return tdsl.auto_schedule(Y, target="cuda"), [X, Y]


def _add(n):
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.placeholder((n,), name="B")
    C = tdsl.compute((n,), lambda i: A[i] + B[i], name="C")
    return tdsl.auto_schedule(C, target="cuda"), [A, B, C]


def _kernel(make, name):
    def build():
        s, args = make()
        return tdsl.build(s, args, target="cuda", name=name), \
            [(tuple(int(d) for d in a.shape), a.dtype) for a in args]
    return build


def _random(shape, dtype):
    x = np.random.rand(*shape).astype(np.float32)
    return tdsl.nd.float32_to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)


def kernel_rows():
    rows = []
    for n in (1024, 4096):
        mm = lambda t, d, n=n: (lambda a=t.rand(n, n, device=d), b=t.rand(n, n, device=d): lambda: a @ b)()
        rows.append(Row(f"sgemm hand {n}", _kernel(lambda n=n: ex.matmul_fast_schedule(n, n, n), "sgemm"),
                        2.0 * n ** 3, "TFLOP/s", mm))
        rows.append(Row(f"gemm auto {n}", _kernel(lambda n=n: _gemm_auto(n), "gemm_auto"), 2.0 * n ** 3,
                        "TFLOP/s", mm))

        def mm_bf16(t, d, n=n):
            a, b = (t.rand(n, n, device=d, dtype=t.bfloat16) for _ in range(2))
            return lambda: a @ b
        rows.append(Row(f"bf16 gemm auto {n}", _kernel(lambda n=n: _gemm_bf16_auto(n), "gemm_bf16"),
                        2.0 * n ** 3, "TFLOP/s", mm_bf16))
    # Hopper only (sm_90a): the warpgroup-MMA schedule, written, beside the same torch
    rows.append(Row("bf16 gemm wgmma 4096", _kernel(lambda: _gemm_bf16_wgmma(4096), "gemm_wgmma"),
                    2.0 * 4096 ** 3, "TFLOP/s", mm_bf16))

    def conv(t, d):
        x, w = t.rand(8, 64, 56, 56, device=d), t.rand(64, 64, 3, 3, device=d)
        return lambda: t.nn.functional.conv2d(x, w, padding=1)
    rows.append(Row("conv 3x3 64->64 56x56 b8 auto", _kernel(lambda: _conv_auto(8, 64, 56, 56, 64), "conv"),
                    2.0 * 8 * 64 * 64 * 9 * 56 * 56, "TFLOP/s", conv))

    def rowsum(t, d):
        a = t.rand(8192, 8192, device=d)
        return lambda: a.sum(dim=1)
    rows.append(Row("row sum 8192x8192 auto", _kernel(lambda: _rowsum_auto(8192, 8192), "rowsum"),
                    4.0 * 8192 * 8192, "GB/s", rowsum))

    def softmax(t, d):
        a = t.rand(16384, 1024, device=d)
        return lambda: t.softmax(a, dim=1)
    rows.append(Row("softmax 16384x1024 auto", _kernel(lambda: _softmax_auto(16384, 1024), "softmax"),
                    8.0 * 16384 * 1024, "GB/s", softmax))
    n = 64 << 20

    def add(t, d):
        a, b = t.rand(n, device=d), t.rand(n, device=d)
        return lambda: a + b
    rows.append(Row("add 64M", _kernel(lambda: _add(n), "add"), 12.0 * n, "GB/s", add))
    return rows


def network(name, batch):
    """(onnx model, torch module or None, input shape)."""
    shape = (batch, 3, 224, 224)
    try:
        import torch  # noqa: F401
        from tdsl.graph import zoo
        key = {"resnet18": "resnet18", "mobilenetv2": "mobilenet_v2"}[name]
        return zoo.export(key, dynamic=True), zoo.seeded_module(key), shape
    except ImportError:
        from tdsl.graph import models
        if name == "resnet18":
            return models.resnet18(batch=batch), None, shape
        return models.mobilenetv2_blocks(batch=batch), None, (batch, 3, 56, 56)


def build_network(model, shape):
    import tdsl.graph as G
    name = model.graph.input[0].name
    mod = G.optimize(G.from_onnx(model, shape={name: shape}))
    return G.build(mod, target="cuda")


# -------------------------------------------------------------------- compile only

def ptxas_report(modules) -> str:
    """Registers, spills, shared memory and the lowest occupancy over the kernels of
    `modules` on sm_90 (`module.resources`: NVRTC's ptxas, or the standalone one)."""
    try:
        recs = [r for m in modules for r in m.resources("sm_90")]
    except tdsl.BuildError as e:
        return "ptxas: " + str(e).splitlines()[0]
    return (f"{len(recs):3d} kernels, registers <= {max((r.registers for r in recs), default=0):3d}, "
            f"smem <= {max((r.shared_bytes for r in recs), default=0):5d} B, "
            f"spill bytes {sum(r.spill_bytes for r in recs)}, occupancy >= "
            f"{min((r.occupancy.fraction for r in recs), default=0):.0%}")


def compile_only(rows, nets):
    print("compile-only: every row's kernels built for cuda (PTX through NVRTC); ptxas's "
          "registers, spills and shared memory on sm_90 per row")
    for row in rows:
        t0 = time.perf_counter()
        f, _ = row.build()
        f.get_source("ptx")
        line = f"  {row.name:28s} built in {time.perf_counter() - t0:5.2f} s"
        print(line + "  " + ptxas_report([f]), flush=True)
    for name, batch in nets:
        model, _, shape = network(name, batch)
        t0 = time.perf_counter()
        exe = build_network(model, shape)
        line = f"  {name} b{batch:<3d} {len(exe.steps):3d} kernels built in {time.perf_counter() - t0:5.1f} s"
        line += "  " + ptxas_report({id(k.module): k.module for k, _, _ in exe.steps}.values())
        print(line, flush=True)


# ------------------------------------------------------------------------ on a GPU

def block_time(fn, sync, number, repeat=3):
    """Seconds per call: the best of `repeat` blocks of `number` calls, one wait each."""
    fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def _reference(name, inputs):
    """The row's answer in float64 from numpy's copies of its inputs (bfloat16 widened)."""
    import torch
    xs = [torch.from_numpy(tdsl.nd.bfloat16_to_float32(x) if x.dtype == np.uint16 else x)
          .to("cuda", torch.float64) for x in inputs]
    if "gemm" in name:
        return (xs[0] @ xs[1]).cpu().numpy()
    if name.startswith("conv"):
        return torch.nn.functional.conv2d(xs[0], xs[1]).cpu().numpy()
    if name.startswith("row sum"):
        return xs[0].sum(dim=1).cpu().numpy()
    if name.startswith("softmax"):
        return torch.softmax(xs[0], dim=1).cpu().numpy()
    return (xs[0] + xs[1]).cpu().numpy()


def torch_fp32():
    """torch with its float32 convs and matmuls in float32: cuDNN allows TF32 by default
    (ResNet-18 at batch 8 ran 1.43 ms on an H200 with it, 1.94 without)."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def time_on_device(f, host, number, dev):
    """Seconds per call of module `f` on copies of the numpy arrays `host` (its last the
    output), and that output as float32."""
    arrays = [tdsl.nd.array(x, dev) for x in host]
    t = f.time_evaluator(number=number, repeat=3)(*arrays).min
    out = arrays[-1].numpy()
    return t, (tdsl.nd.bfloat16_to_float32(out) if out.dtype == np.uint16 else out)


def _rel_err(out, ref):
    out = np.asarray(out, np.float64)
    if not np.isfinite(out).all():
        return float("nan")
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def _row(row, torch, dev, number):
    f, shapes = row.build()
    host = [_random(s, dtype) for s, dtype in shapes]
    t_tdsl, out = time_on_device(f, host, number, dev)
    err = _rel_err(out, _reference(row.name, host[:-1]))
    t_torch = block_time(row.torch(torch, "cuda"), torch.cuda.synchronize, number)
    scale = 1e12 if row.unit == "TFLOP/s" else 1e9
    a, b = row.work / t_tdsl / scale, row.work / t_torch / scale
    print(f"{row.name:30s} {a:10.2f} {b:10.2f} {row.unit:>8s} {a / b:10.0%} {err:9.1e}", flush=True)


def _net(name, batch, torch, number):
    model, tm, shape = network(name, batch)
    t0 = time.perf_counter()
    exe = build_network(model, shape)
    built = time.perf_counter() - t0
    x = np.random.rand(*shape).astype(np.float32)
    exe.set_input(exe.input_names[0], x)
    r = exe.benchmark(number=number, repeat=3)
    t_tdsl = r["min"]
    if tm is None:
        print(f"{name + ' b' + str(batch):30s} {t_tdsl * 1e3:8.3f}ms {'-':>10s} {'ms':>8s}")
        return
    tm = tm.cuda()
    xt = torch.from_numpy(x).cuda()
    with torch.no_grad():
        t_torch = block_time(lambda: tm(xt), torch.cuda.synchronize, number)
        ref = tm(xt).double().cpu().numpy()
    err = _rel_err(exe.run(x)[0], ref)
    print(f"{name + ' b' + str(batch):30s} {t_tdsl * 1e3:8.3f}ms {t_torch * 1e3:8.3f}ms {'ms':>8s} "
          f"{t_torch / t_tdsl:10.0%} {err:9.1e}   (built in {built:.0f} s)", flush=True)
    exe.profile(number=3)
    g = exe.stats.get("cuda_graph")
    if g:
        print(f"{'':30s} CUDA graph saved {g['saved_s'] * 1e3:.3f} ms a run "
              f"({g['launches_s'] * 1e3:.3f} -> {g['graph_s'] * 1e3:.3f} ms of device time)")


def measure(rows, nets, number) -> int:
    """Times every row beside torch and checks its output against a float64 reference; a
    row that fails is reported and the others still run. Returns the number of failures."""
    torch = torch_fp32()
    dev = tdsl.cuda(0)
    print(f"device: {dev.name}; torch {torch.__version__}, TF32 off\n")
    print(f"{'row':30s} {'tdsl':>10s} {'torch':>10s} {'unit':>8s} {'tdsl/torch':>10s} {'rel err':>9s}")
    failed = 0
    jobs = [(r.name, lambda r=r: _row(r, torch, dev, number)) for r in rows]
    jobs += [(f"{n} b{b}", lambda n=n, b=b: _net(n, b, torch, number)) for n, b in nets]
    for name, job in jobs:
        try:
            job()
        except Exception as e:  # one broken row must not hide the others' numbers
            failed += 1
            print(f"{name:30s} FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                  flush=True)
            traceback.print_exc()
    return failed


# ------------------------------------------------------------------ compute-sanitizer

# the tests that launch CUDA kernels on the device (test_gpu_errors.py is left out: it
# checks that illegal schedules are refused, and runs nothing)
SANITIZE_TESTS = ["tests/test_gpu_kernels.py", "tests/test_gpu_runtime.py", "tests/test_graph_device.py",
                  "tests/test_guarded_loads.py", "tests/test_graph_gpu_strategies.py"]


def sanitize(pytest_args) -> int:
    """memcheck over the GPU tests: 0 when clean (or no GPU), 1 otherwise."""
    if not tdsl.cuda(0).exist:
        print("no GPU: compute-sanitizer needs one; nothing checked")
        return 0
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        print("compute-sanitizer is not on the PATH (it ships with the CUDA toolkit)")
        return 1
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    cmd = [exe, "--tool", "memcheck", "--error-exitcode", "99", "--print-limit", "20",
           sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + (pytest_args or SANITIZE_TESTS)
    print(" ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    out = r.stdout + r.stderr
    summary = [ln for ln in out.splitlines() if "ERROR SUMMARY" in ln or " passed" in ln or " failed" in ln]
    errors = [ln for ln in out.splitlines() if ln.startswith("========= ") and "ERROR SUMMARY" not in ln]
    print("\n".join(errors[:60] + summary))
    if r.returncode == 99:
        print("compute-sanitizer: memcheck found errors")
    elif r.returncode:
        print(f"tests failed under compute-sanitizer (exit {r.returncode})")
    return 1 if r.returncode else 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="networks at batch 1 only")
    ap.add_argument("--number", type=int, default=20)
    ap.add_argument("--sanitize", nargs=argparse.REMAINDER, metavar="PYTEST_ARGS",
                    help="run the GPU tests under compute-sanitizer memcheck (all further arguments "
                         "go to pytest)")
    opt = ap.parse_args(argv)
    if opt.sanitize is not None:
        return sanitize(opt.sanitize)
    rows = kernel_rows()
    nets = [(n, b) for n in ("resnet18", "mobilenetv2") for b in ((1,) if opt.quick else (1, 8))]
    try:
        import torch
        gpu = tdsl.cuda(0).exist and torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        print("no GPU" + ("" if tdsl.cuda(0).exist else " (tdsl.cuda(0) is missing)")
              + ("" if _has_torch() else "; torch is not installed: tdsl.graph.models' networks"))
        compile_only(rows, nets)
        return 0
    return 1 if measure(rows, nets, opt.number) else 0


def _has_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    sys.exit(main())
