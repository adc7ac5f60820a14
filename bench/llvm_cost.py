"""What a network's build pays LLVM for: modules, functions and IR lines of a cold build,
and the fixed cost of an LLVM module against the cost of the functions in it.

    python bench/llvm_cost.py                       # the fixed costs alone
    python bench/llvm_cost.py model.onnx [name=N ...]   # and a cold build of model.onnx

The fixed cost: one small vectorized kernel's IR compiled as N modules (each parsed,
optimised at O2, emitted, loaded by its own MCJIT engine), against the same N functions
linked into one module, timed by the calling thread's CPU time so that other processes on
the machine do not count. The difference per module is what compiling a kernel with its
size-class variants as one module could save per variant."""
from __future__ import annotations

import re
import sys
import time
from contextlib import contextmanager

import tdsl
from tdsl.codegen import llvm as L
from tdsl.codegen.llvm import jit
from tdsl.lower import build_passes
from tdsl.runtime import cpu
from tdsl.target import llvm_binding

# the names each module defines for itself; renamed per copy so that copies can be linked
_OWN = r'@"?(__tdsl_num_threads|__tdsl_signature_data|__tdsl_signature|{sym})"?(?=\W)'


def small_kernel_ir():
    """(IR text, symbol) of a kernel over a run-time length: one vectorized loop."""
    n = tdsl.var("n")
    a = tdsl.placeholder((n,), name="A")
    b = tdsl.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="B")
    s = tdsl.create_schedule(b)
    _, inner = s[b].split(b.op.axis[0], 16)
    s[b].vectorize(inner)
    text, sig, _ = L.codegen(build_passes(tdsl.lower(s, [a, b], "unit"), False), "llvm")
    return text, sig["symbol"]


def renamed(text, symbol, i):
    return re.sub(_OWN.format(sym=re.escape(symbol)), lambda m: f"@{m.group(1)}_{i}", text)


def compile_linked(llvm, texts, tgt):
    """The object file of `texts` linked into one module, as jit.compile_ir compiles."""
    mod = llvm.parse_assembly(texts[0])
    for t in texts[1:]:
        mod.link_in(llvm.parse_assembly(t))
    mod.verify()
    mod.triple = tgt.triple
    jit.optimize(llvm, mod, tgt)
    return tgt.tm.emit_object(mod)


def module_cost(copies=12, repeats=3):
    """(seconds per extra module, seconds per function in one module, seconds to load one
    module), the least of `repeats` measurements of thread CPU time."""
    llvm = llvm_binding()
    cpu.load_support_libraries(llvm)
    tgt = L.parse_target("llvm")
    text, symbol = small_kernel_ir()
    texts = [renamed(text, symbol, i) for i in range(copies)]
    per_module, per_function, load = [], [], []
    for _ in range(repeats):
        t0 = time.thread_time()
        objs = [compile_linked(llvm, [t], tgt) for t in texts]
        separate = time.thread_time() - t0
        t0 = time.thread_time()
        compile_linked(llvm, texts, tgt)
        linked = time.thread_time() - t0
        t0 = time.thread_time()
        for i, obj in enumerate(objs):
            cpu.load_object(llvm, "llvm-cost", obj, "", "", tgt, f"{symbol}_{i}", 0.0)
        load.append((time.thread_time() - t0) / copies)
        per_module.append((separate - linked) / (copies - 1))
        per_function.append(linked / copies)
    return min(per_module), min(per_function), min(load)


@contextmanager
def _recorded():
    """Records (symbol, IR text, target) of every module compiled within (not answered
    by a cache)."""
    texts = []
    compile_ir = jit.compile_ir

    def record(ir_text, target, symbol):
        texts.append((symbol, ir_text, target))
        return compile_ir(ir_text, target, symbol)
    jit.compile_ir = record
    try:
        yield texts
    finally:
        jit.compile_ir = compile_ir


def build_counts(model, dims=None):
    """{modules, functions, ir_lines, cpu_s, llvm_s, largest} of a cold build of ONNX
    `model` (a path or a ModelProto) with `dims`: a fresh disk cache and emptied
    in-process caches. `llvm_s`: the thread CPU time of compiling its modules again one
    after another (the build's own LLVM time overlaps its lowering in another thread);
    `largest`: [(symbol, IR lines, LLVM s)] of the 5 modules that took longest."""
    import tdsl.graph as G
    from common import frozen_heap
    from dynamic import cold_caches
    with frozen_heap(), cold_caches("tdsl-llvm-cost-"), _recorded() as texts:
        c0 = time.process_time()
        G.build(G.optimize(G.from_onnx(model, dims=dims)))
        cpu_s = time.process_time() - c0
    llvm = llvm_binding()
    timed = []
    for sym, t, tgt in texts:
        t0 = time.thread_time()
        compile_linked(llvm, [t], tgt)
        timed.append((sym, t, time.thread_time() - t0))
    texts = timed
    largest = sorted(((sym, t.count("\n"), s) for sym, t, s in texts), key=lambda r: -r[2])
    return {"modules": len(texts),
            "functions": sum(len(re.findall(r"^define ", t, re.M)) for _, t, _ in texts),
            "ir_lines": sum(t.count("\n") for _, t, _ in texts), "cpu_s": cpu_s,
            "llvm_s": sum(s for _, _, s in texts), "largest": largest[:5]}


def main(argv):
    mod, fn, load = module_cost()
    print(f"fixed cost of a module: {mod * 1e3:.1f} ms to compile + {load * 1e3:.2f} ms to "
          f"load; a small kernel's function in a shared module: {fn * 1e3:.1f} ms "
          "(thread CPU time, least of 3)")
    if argv:
        dims = {k: int(v) for k, v in (a.split("=", 1) for a in argv[1:])} or None
        c = build_counts(argv[0], dims)
        print(f"{argv[0]} dims={dims}: {c['modules']} modules, {c['functions']} functions, "
              f"{c['ir_lines']} IR lines; build {c['cpu_s']:.2f} s CPU (cold), LLVM "
              f"{c['llvm_s']:.2f} s, of which the modules' fixed cost {c['modules'] * (mod + load):.3f} s")
        for sym, lines, sec in c["largest"]:
            print(f"  {sym:48s} {lines:6d} IR lines  {sec:.3f} s LLVM")


if __name__ == "__main__":
    main(sys.argv[1:])
