"""The GPU suite: tdsl beside torch (TF32 off) in the same run, on a CUDA GPU.

    python bench/gpu.py [--quick] [--number 20]

Rows: hand SGEMM (tdsl.examples.gpu.matmul_fast_schedule) and auto-scheduled GEMM at 1024
and 4096, the ResNet conv layer (3x3 64->64 56x56 batch 8), row sum 8192x8192, softmax
16384x1024, add of 64M floats, and ResNet-18 and MobileNetV2 through the graph executor at
batch 1 and 8 (torchvision models exported by tdsl.graph.zoo; tdsl.graph.models' own
ResNet-18 and MobileNetV2 blocks when torch is missing). Each side is timed in blocks
(warm-up, N calls, one wait): kernels by device events, networks by wall time of a whole
inference. Prints TFLOP/s (GB/s for memory-bound rows) and tdsl's speed as a share of
torch's.

With no GPU it prints "no GPU" and runs the compile-only checks: every row's kernels are
built for cuda (PTX through NVRTC) and, when `ptxas` is on the PATH, assembled for sm_90
to report registers, spills and shared memory per kernel. `--quick` checks the networks at
batch 1 only.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl  # noqa: E402
from tdsl.examples import gpu as ex  # noqa: E402


# ------------------------------------------------------------------------- the rows

class Row:
    """name; build() -> (tdsl module, shapes of its arguments); work (flops or bytes) and
    unit; torch(t, dev) -> a no-argument callable computing the same on the GPU."""

    def __init__(self, name, build, work, unit, torch_fn):
        self.name, self.build, self.work, self.unit, self.torch = name, build, work, unit, torch_fn


def _gemm_auto(n):
    A = tdsl.placeholder((n, n), name="A")
    B = tdsl.placeholder((n, n), name="B")
    k = tdsl.reduce_axis((0, n), name="k")
    C = tdsl.compute((n, n), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tdsl.auto_schedule(C, target="cuda"), [A, B, C]


def _add(n):
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.placeholder((n,), name="B")
    C = tdsl.compute((n,), lambda i: A[i] + B[i], name="C")
    return tdsl.auto_schedule(C, target="cuda"), [A, B, C]


def _kernel(make, name):
    def build():
        s, args = make()
        return tdsl.build(s, args, target="cuda", name=name), [tuple(int(d) for d in a.shape) for a in args]
    return build


def kernel_rows():
    rows = []
    for n in (1024, 4096):
        mm = lambda t, d, n=n: (lambda a=t.rand(n, n, device=d), b=t.rand(n, n, device=d): lambda: a @ b)()
        rows.append(Row(f"sgemm hand {n}", _kernel(lambda n=n: ex.matmul_fast_schedule(n, n, n), "sgemm"),
                        2.0 * n ** 3, "TFLOP/s", mm))
        rows.append(Row(f"gemm auto {n}", _kernel(lambda n=n: _gemm_auto(n), "gemm_auto"), 2.0 * n ** 3,
                        "TFLOP/s", mm))

    def conv(t, d):
        x, w = t.rand(8, 64, 56, 56, device=d), t.rand(64, 64, 3, 3, device=d)
        return lambda: t.nn.functional.conv2d(x, w, padding=1)
    rows.append(Row("conv 3x3 64->64 56x56 b8", _kernel(lambda: ex.conv2d_schedule(8, 64, 58, 58, 64), "conv"),
                    2.0 * 8 * 64 * 64 * 9 * 56 * 56, "TFLOP/s", conv))

    def rowsum(t, d):
        a = t.rand(8192, 8192, device=d)
        return lambda: a.sum(dim=1)
    rows.append(Row("row sum 8192x8192", _kernel(lambda: ex.sum_schedule(8192, 8192), "rowsum"),
                    4.0 * 8192 * 8192, "GB/s", rowsum))

    def softmax(t, d):
        a = t.rand(16384, 1024, device=d)
        return lambda: t.softmax(a, dim=1)
    rows.append(Row("softmax 16384x1024", _kernel(lambda: ex.softmax_schedule(16384, 1024), "softmax"),
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
        model = zoo.export({"resnet18": "resnet18", "mobilenetv2": "mobilenet_v2"}[name], dynamic=True)
        import torchvision
        tm = getattr(torchvision.models, {"resnet18": "resnet18", "mobilenetv2": "mobilenet_v2"}[name])(weights=None)
        return model, tm.eval(), shape
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

def sm90_ptx(module) -> str:
    """PTX for sm_90 from nvcc when it is on the PATH (its PTX version is the one the ptxas
    beside it reads: NVRTC's newer wheel writes a version ptxas 13.0 refuses), else NVRTC's."""
    if shutil.which("nvcc"):
        from tdsl.runtime.cuda import nvcc_ptx
        return nvcc_ptx(module.get_source(), "sm_90")
    from tdsl.runtime.cuda import compile_ptx
    return compile_ptx(module.get_source(), "compute_90")


def ptxas_report(modules) -> str:
    """Registers, spills and shared memory over the kernels of `modules` from `ptxas -v`
    for sm_90."""
    regs, smem, spills = [], [0], 0
    with tempfile.TemporaryDirectory(prefix="tdsl_bench_") as tmp:
        path = os.path.join(tmp, "k.ptx")
        for m in modules:
            with open(path, "w") as f:
                f.write(sm90_ptx(m))
            r = subprocess.run(["ptxas", "-v", "-arch=sm_90", path, "-o", os.devnull],
                               capture_output=True, text=True)
            if r.returncode:
                return "ptxas failed: " + " ".join(r.stderr.strip().splitlines()[:1])
            regs += [int(x) for x in re.findall(r"Used (\d+) registers", r.stderr)]
            spills += sum(int(a) + int(b) for a, b in
                          re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr))
            smem += [int(x) for x in re.findall(r"(\d+) bytes smem", r.stderr)]
    return f"{len(regs):3d} kernels, registers <= {max(regs, default=0):3d}, smem <= {max(smem):5d} B, " \
           f"spill bytes {spills}"


def compile_only(rows, nets):
    have_ptxas = shutil.which("ptxas") is not None
    print("compile-only: every row's kernels built for cuda (PTX through NVRTC)"
          + ("; ptxas -v -arch=sm_90 per row" if have_ptxas else "; ptxas is not on the PATH"))
    for row in rows:
        t0 = time.perf_counter()
        f, _ = row.build()
        f.get_source("ptx")
        line = f"  {row.name:28s} built in {time.perf_counter() - t0:5.2f} s"
        print(line + ("  " + ptxas_report([f]) if have_ptxas else ""), flush=True)
    for name, batch in nets:
        model, _, shape = network(name, batch)
        t0 = time.perf_counter()
        exe = build_network(model, shape)
        line = f"  {name} b{batch:<3d} {len(exe.steps):3d} kernels built in {time.perf_counter() - t0:5.1f} s"
        if have_ptxas:
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


def measure(rows, nets, number):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = tdsl.cuda(0)
    print(f"device: {dev.name}; torch {torch.__version__}, TF32 off\n")
    print(f"{'row':30s} {'tdsl':>10s} {'torch':>10s} {'unit':>8s} {'tdsl/torch':>10s}")
    for row in rows:
        f, shapes = row.build()
        arrays = [tdsl.nd.array(np.random.rand(*s).astype(np.float32), dev) for s in shapes]
        t_tdsl = f.time_evaluator(number=number, repeat=3)(*arrays).min
        t_torch = block_time(row.torch(torch, "cuda"), torch.cuda.synchronize, number)
        scale = 1e12 if row.unit == "TFLOP/s" else 1e9
        a, b = row.work / t_tdsl / scale, row.work / t_torch / scale
        print(f"{row.name:30s} {a:10.2f} {b:10.2f} {row.unit:>8s} {a / b:10.0%}", flush=True)
    for name, batch in nets:
        model, tm, shape = network(name, batch)
        exe = build_network(model, shape)
        x = np.random.rand(*shape).astype(np.float32)
        exe.set_input(exe.input_names[0], x)
        r = exe.benchmark(number=number, repeat=3)
        t_tdsl = r["min"]
        if tm is None:
            print(f"{name + ' b' + str(batch):30s} {t_tdsl * 1e3:9.3f}ms {'-':>10s} {'ms':>8s}")
            continue
        tm = tm.cuda()
        xt = torch.from_numpy(x).cuda()
        with torch.no_grad():
            t_torch = block_time(lambda: tm(xt), torch.cuda.synchronize, number)
        print(f"{name + ' b' + str(batch):30s} {t_tdsl * 1e3:8.3f}ms {t_torch * 1e3:8.3f}ms {'ms':>8s} "
              f"{t_torch / t_tdsl:10.0%}", flush=True)
        exe.profile(number=3)
        g = exe.stats.get("cuda_graph")
        if g:
            print(f"{'':30s} CUDA graph saved {g['saved_s'] * 1e3:.3f} ms a run "
                  f"({g['launches_s'] * 1e3:.3f} -> {g['graph_s'] * 1e3:.3f} ms of device time)")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="networks at batch 1 only")
    ap.add_argument("--number", type=int, default=20)
    opt = ap.parse_args(argv)
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
    measure(rows, nets, opt.number)
    return 0


def _has_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    sys.exit(main())
