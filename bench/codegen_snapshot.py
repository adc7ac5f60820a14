"""Every piece of code tdsl generates for a fixed set of workloads, written to a folder, so
two trees can be compared byte for byte: a refactoring must leave the generated code as it
was (no speed can move).

    python bench/codegen_snapshot.py write OUT [--quick] [--zoo]  # this tree's code into OUT
    python bench/codegen_snapshot.py compare OLD NEW       # exit 1 on any difference

Workloads: the shipped schedules (`tdsl.examples`) for the host, for `-mcpu=haswell` and,
for the GPU ones, CUDA, OpenCL and C-emulation source; `tdsl.auto_schedule` on their
definitions for "llvm" and "cuda"; every kernel of a ResNet-18 and of a BERT-style encoder
and of four smaller networks (`tdsl.graph.models`) built for the host, and the first
two for `-mcpu=haswell` and CUDA. The compile cache is off, so every build
generates its code. What is recorded is the unoptimised LLVM IR (`codegen.llvm.codegen`)
and the printed C, CUDA and OpenCL source, one file per generated function; a workload that
raises records its error text instead.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import re
import sys
import threading
import traceback

os.environ["TDSL_CACHE"] = "0"


class Recorder:
    """Collects (workload, function name, text); builds on other threads (the graph
    executor compiles two kernels at once) record under the workload that started them."""

    def __init__(self):
        self.workload = "none"
        self.items = {}
        self.lock = threading.Lock()

    def add(self, name, ext, text):
        # the graph executor numbers its kernels in the order two threads finish them:
        # the number is not part of what is compared
        stem = re.sub(r"_\d+$", "", name)
        text = text.replace(name, stem)
        with self.lock:
            digest = hashlib.sha256(text.encode()).hexdigest()[:12]
            self.items[f"{self.workload}/{stem}.{digest}.{ext}"] = text

    def install(self):
        from tdsl.codegen import llvm, source_build
        rec = self
        codegen, c_source = llvm.codegen, source_build.c_source

        def spy_codegen(func, target="llvm"):
            out = codegen(func, target)
            rec.add(func.name, "ll", out[0])
            return out

        def spy_c_source(func, symbol=None):
            text, sig = c_source(func, symbol)
            rec.add(func.name, "c", text)
            return text, sig

        llvm.codegen, source_build.c_source = spy_codegen, spy_c_source
        if hasattr(source_build, "build_kernels"):
            build_kernels = source_build.build_kernels

            def spy_build_kernels(func, kind, printer, *args):
                mod = build_kernels(func, kind, printer, *args)
                rec.add(func.name, {"cuda": "cu", "opencl": "cl"}.get(kind, "gpu.c"), mod.source)
                return mod
            source_build.build_kernels = spy_build_kernels
        else:   # trees from before the target-kind registry print through printer_for
            printer_for = source_build.printer_for

            def spy_printer_for(target, func=None):
                printer = printer_for(target, func)
                print_kernels = printer.print_kernels

                def spy_print(f):
                    text = print_kernels(f)
                    rec.add(f.name, {"cuda": "cu", "opencl": "cl"}.get(target, "gpu.c"), text)
                    return text
                printer.print_kernels = spy_print
                return printer
            source_build.printer_for = spy_printer_for
        # the executor compiles two kernels at a time; one at a time, in the order of the
        # network, the snapshot does not depend on which thread finishes first
        from concurrent.futures import ThreadPoolExecutor
        from tdsl.graph import executor
        executor.ThreadPoolExecutor = lambda max_workers, **kw: ThreadPoolExecutor(1, **kw)

    def run(self, label, fn):
        self.workload = label
        try:
            fn()
        except Exception as e:   # the error is part of the snapshot
            self.add("error", "txt", "".join(traceback.format_exception_only(type(e), e)))
        print(f"  {label}: {sum(k.startswith(label + '/') for k in self.items)} texts", flush=True)


def shipped(quick):
    import tdsl
    from tdsl.examples import gemm, gpu, kernels, lowp_gemm, mma_gemm, peak, wgmma_gemm
    n = 128 if quick else 256
    out = []
    for tgt in ("llvm", "llvm -mcpu=haswell"):
        for name in ("default", "blocking", "vectorize", "loop_permutation", "array_packing",
                     "write_cache", "parallel", "register_blocked"):
            out.append((f"gemm.{name}[{tgt}]", tgt, lambda name=name, tgt=tgt: getattr(gemm, name)(
                n, n, n, target=tgt)))
        out += [
            (f"bias_relu[{tgt}]", tgt, lambda tgt=tgt: kernels.bias_relu_schedule(64, 256, target=tgt)),
            (f"softmax[{tgt}]", tgt, lambda tgt=tgt: kernels.softmax_schedule(64, 256, target=tgt)),
            (f"conv2d[{tgt}]", tgt, lambda tgt=tgt: kernels.conv2d_schedule(64, 28, 28, 64, target=tgt)),
            (f"peak[{tgt}]", tgt, lambda tgt=tgt: peak.schedule(target=tgt)[:2]),
            (f"lowp_gemm[{tgt}]", tgt, lambda tgt=tgt: lowp_gemm.tensorized(64, 64, 64, target=tgt)),
        ]
    for tgt in ("cuda", "opencl", "c"):
        out += [
            (f"gpu.elementwise[{tgt}]", tgt, lambda: gpu.elementwise_schedule(4096)),
            (f"gpu.matmul[{tgt}]", tgt, lambda: gpu.matmul_schedule(256, 256, 256)),
            (f"gpu.matmul_fast[{tgt}]", tgt, lambda: gpu.matmul_fast_schedule(512, 512, 512)),
            (f"gpu.conv2d[{tgt}]", tgt, lambda: gpu.conv2d_schedule(1, 32, 28, 28, 32)),
            (f"gpu.softmax[{tgt}]", tgt, lambda: gpu.softmax_schedule(64, 256)),
            (f"gpu.sum[{tgt}]", tgt, lambda: gpu.sum_schedule(64, 256)),
        ]
    out += [("mma_gemm[cuda]", "cuda", lambda: mma_gemm.schedule(256, 256, 256)),
            ("wgmma_gemm[cuda]", "cuda", lambda: wgmma_gemm.schedule(256, 256, 256))]
    for label, tgt, make in out:
        def go(make=make, tgt=tgt):
            s, args = make()[:2]
            tdsl.build(s, args, target=tgt)
        yield label, go


def placeholders(out):
    """The placeholders `out` reads, in the order a depth-first walk meets them."""
    seen, found = set(), []

    def walk(t):
        if t.op in seen:
            return
        seen.add(t.op)
        if not t.op.input_tensors():
            found.append(t)
        for u in t.op.input_tensors():
            walk(u)
    walk(out)
    return found


def auto(quick):
    import tdsl
    from tdsl.examples import gemm, kernels, pipelines
    n = 128 if quick else 256
    defs = {
        "gemm": lambda: gemm.definition(n, n, n),
        "bias_relu": lambda: kernels.bias_relu(64, 256),
        "softmax": lambda: kernels.softmax(64, 256),
        "conv_nchwc": lambda: kernels.conv_nchwc(32, 28, 28, 32, 3, 1, 1, 16),
        "depthwise3x3": lambda: kernels.depthwise3x3(32, 28, 28),
        "row_sum": lambda: kernels.row_sum(256, 512),
        **{f"pipeline.{k}": (lambda f=f: f(256, 256)) for k, (f, _) in pipelines.PIPELINES.items()},
    }
    for tgt in ("llvm", "llvm -mcpu=haswell", "cuda"):
        for name, make in defs.items():
            def go(make=make, tgt=tgt):
                tensors = make()
                tensors = list(tensors) if isinstance(tensors, (tuple, list)) else [tensors]
                s = tdsl.auto_schedule(tensors[-1], target=tgt)
                rec.add("explain", "txt", str(s.explain()))
                tdsl.build(s, placeholders(tensors[-1]) + [tensors[-1]], target=tgt)
            yield f"auto.{name}[{tgt}]", go


def networks(quick, zoo=False):
    import onnx
    import tdsl.graph as G
    from tdsl.graph import models
    size = 112 if quick else 224
    if zoo:   # the torch-exported zoo's (pip install -e '.[zoo]')
        from tdsl.graph import zoo as Z
        for name in ("resnet18", "bert"):
            for tgt in ("llvm", "llvm -mcpu=haswell"):
                yield f"zoo.{name}[{tgt}]", lambda name=name, tgt=tgt: G.build(
                    G.optimize(G.from_onnx(Z.export(name)), target=tgt), target=tgt)
    nets = {"resnet18": lambda: models.resnet18(1, size),
            "bert": lambda: models.transformer_encoder(1, 128, 256, 4, 1024),
            "mobilenetv2_blocks": lambda: models.mobilenetv2_blocks(1, 56),
            "conv1d_net": lambda: models.conv1d_net(1, 4000),
            "conv3d_net": lambda: models.conv3d_net(1, 8, 28),
            "mlp": lambda: models.mlp(8)}
    for tgt in ("llvm", "llvm -mcpu=haswell", "cuda"):
        for name, make in nets.items():
            if tgt != "llvm" and name not in ("resnet18", "bert"):
                continue

            def go(make=make, tgt=tgt):
                model = make()
                path = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"snapshot_{os.getpid()}.onnx"
                onnx.save(model, str(path))
                try:
                    G.build(G.optimize(G.from_onnx(str(path)), target=tgt), target=tgt)
                finally:
                    path.unlink()
            yield f"net.{name}[{tgt}]", go


rec = Recorder()


def write(out, quick, zoo):
    rec.install()
    for group in (shipped, auto, networks):
        for label, go in (networks(quick, zoo) if group is networks else group(quick)):
            rec.run(label, go)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for key, text in rec.items.items():
        path = out / key.replace(" ", "_")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"{len(rec.items)} texts in {out}")


def compare(old, new):
    def files(d):
        d = pathlib.Path(d)
        return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}
    a, b = files(old), files(new)
    gone, added = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    for k in gone:
        print("only in", old, k)
    for k in added:
        print("only in", new, k)
    print(f"{len(a)} texts in {old}, {len(b)} in {new}: "
          f"{len(set(a) & set(b))} identical, {len(gone)} + {len(added)} differ")
    return 1 if gone or added else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--quick", action="store_true", help="smaller sizes")
    w.add_argument("--zoo", action="store_true", help="and the torch-exported ResNet-18 and BERT")
    c = sub.add_parser("compare")
    c.add_argument("old")
    c.add_argument("new")
    o = p.parse_args(argv)
    if o.cmd == "write":
        write(o.out, o.quick, o.zoo)
        return 0
    return compare(o.old, o.new)


if __name__ == "__main__":
    sys.exit(main())
