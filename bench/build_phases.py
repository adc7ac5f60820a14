"""Where a network's cold build spends its CPU, kernel by kernel and phase by phase, with
symbolic sizes against static ones: what tells the dynamic build's extra cost (issue 41's
bound: at most 2x the static build) apart by its cause.

    python bench/build_phases.py distilbert,bert               # the zoo's exports
    python bench/build_phases.py bert --models /tmp/dyn --rounds 3 --sizes 1x1,1x128,8x128

Each build is cold (bench/dynamic.cold_build: no kernel reused from another build, the
heap frozen), the dynamic one with the export's symbolic batch and sequence, the static
ones at each of `--sizes` (by default the sweep's of bench/dynamic.py), taken in turn for
`--rounds` rounds, after one untimed static build (the process's first build pays
for what a process does once: LLVM's and the thread pool's set-up, lazy imports; ~0.1 s
that would land on whichever side came first): the medians per phase are printed. A phase is the thread CPU time of
one step of compiling a kernel, summed over the kernels (the executor compiles two at a
time; each step is charged to the thread that ran it):

- regions: the reads checked against the tensors' shapes (te/regions.check_reads);
- loops: the schedule made loop IR (schedule_ops.schedule_to_func: bound inference);
- passes: the lowering passes (lower.PASSES: simplify, loop_partition, ...);
- ir: LLVM IR generated from the loop IR (codegen.llvm.codegen, Python);
- llvm: parsed, optimised (O2) and compiled to an object (jit's LLVM half);
- load: the object linked into the process (one MCJIT engine per module);
- other: the rest of a kernel's compile (its definition and schedule, fingerprints, the
  compile cache);
- outside kernels: the process's CPU less all of the above (import, graph passes, the
  memory plan, weights packed).

Per model: the dynamic build's kernels (size-class variants marked), the phases of both
sides and the ratio dynamic/static per phase, the share of the dynamic build that its
size-class variants take, and per kernel family (bench/builds_ab.family: a kernel with
its variants, attention with its head reshapes) both sides' CPU, largest extra first. Wall times are not read: the machine may be shared.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import importlib
import os
import sys
import threading
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from builds_ab import family  # noqa: E402
from dynamic import CNN_BATCHES, HELPER, SEQUENCES, _static_dims, _sweep, cold_build  # noqa: E402
from tdsl.codegen import llvm as llvm_codegen  # noqa: E402
from tdsl.codegen.llvm import jit  # noqa: E402
from tdsl.graph import zoo  # noqa: E402
from tdsl.graph.strategy import dispatch  # noqa: E402
from tdsl.runtime import cpu  # noqa: E402

# the module, not the function `tdsl.lower` that the package exports under its name
lower_module = importlib.import_module("tdsl.lower")
PHASES = ("regions", "loops", "passes", "ir", "llvm", "load", "other")


class Phases:
    """{kernel name: Counter(phase: thread CPU s)} of the kernels compiled within
    `recording()`, and which of them are size-class variants."""

    def __init__(self):
        self.kernels = collections.defaultdict(collections.Counter)
        self.variants = set()
        self._current = threading.local()
        self._lock = threading.Lock()

    def _add(self, name, phase, seconds):
        with self._lock:
            self.kernels[name][phase] += seconds

    def _timed(self, phase, fn):
        def timed(*args, **kw):
            t0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                name = getattr(self._current, "name", None)
                if name is not None:
                    self._add(name, phase, time.thread_time() - t0)
        return timed

    def _kernel(self, fn):
        def compile_one(g, group, target, name, *args):
            outer = getattr(self._current, "name", None)
            self._current.name = name
            if g.size_class is not None:
                self.variants.add(name)
            t0 = time.thread_time()
            try:
                return fn(g, group, target, name, *args)
            finally:
                self._add(name, "total", time.thread_time() - t0)
                self._current.name = outer
        return compile_one

    @contextlib.contextmanager
    def recording(self):
        """Within it, every kernel compiled is timed by phase."""
        patches = [(lower_module, "check_reads", "regions"), (lower_module, "schedule_to_func", "loops"),
                   (llvm_codegen, "codegen", "ir"), (jit, "_codegen", "llvm"), (cpu, "load_object", "load")]
        saved = [(mod, attr, getattr(mod, attr)) for mod, attr, _ in patches]
        passes = list(lower_module.PASSES)
        saved.append((dispatch, "_compile_group", dispatch._compile_group))
        try:
            for mod, attr, phase in patches:
                setattr(mod, attr, self._timed(phase, getattr(mod, attr)))
            lower_module.PASSES[:] = [p._replace(fn=self._timed("passes", p.fn)) for p in passes]
            dispatch._compile_group = self._kernel(dispatch._compile_group)
            yield self
        finally:
            for mod, attr, fn in saved:
                setattr(mod, attr, fn)
            lower_module.PASSES[:] = passes

    def per_kernel(self):
        """{kernel: {phase: s}} with "other" the kernel's time outside the timed phases."""
        out = {}
        for name, c in self.kernels.items():
            row = {p: c[p] for p in PHASES if p != "other"}
            row["other"] = max(0.0, c["total"] - sum(row.values()))
            out[name] = row
        return out

    def totals(self):
        rows = self.per_kernel().values()
        return {p: sum(r[p] for r in rows) for p in PHASES}

    def families(self):
        """{kernel family (builds_ab.family: a kernel with its size-class variants,
        attention with its head reshapes): thread CPU s}."""
        out = collections.Counter()
        for name, row in self.per_kernel().items():
            out[family(name)] += sum(row.values())
        return out


def profile_build(model, dims, target="llvm"):
    """(process CPU s, Phases) of a cold build of `model` with `dims` (None: symbolic)."""
    ph = Phases()
    with ph.recording():
        _, _, cpu_s = cold_build(model, dims, target)
    return cpu_s, ph


def _load(name, folder):
    """(symbolic model, the sweep's input shapes or None: from the model's inputs)."""
    if name in HELPER:          # bench/dynamic.py's networks outside the zoo (conv1d_net)
        return _sweep(name)
    path = os.path.join(folder, f"{name}.onnx") if folder else ""
    return (onnx.load(path) if path and os.path.exists(path) else zoo.export(name, dynamic=True)), None


def _shapes(model, sizes, swept=None):
    """The static input shapes to compare with: `sizes` ("1x128,8x128") or the sweep's."""
    if sizes:
        return [tuple(int(x) for x in s.split("x")) for s in sizes.split(",")]
    if swept:
        return list(swept)
    t = model.graph.input[0].type.tensor_type
    if t.elem_type == onnx.TensorProto.INT64:
        return list(SEQUENCES)
    rest = tuple(d.dim_value for d in t.shape.dim[1:])
    return [(b,) + rest for b in CNN_BATCHES]


def summary(dyn, static):
    """[(phase, dynamic s, static s, dynamic - static, dynamic/static)] from phase totals
    (dicts with "cpu" and "outside kernels" besides PHASES)."""
    rows = []
    for p in PHASES + ("outside kernels", "cpu"):
        d, s = dyn[p], static[p]
        rows.append((p, d, s, d - s, d / s if s > 0 else float("nan")))
    return rows


def _with_outside(cpu_s, ph):
    t = ph.totals()
    t["outside kernels"] = max(0.0, cpu_s - sum(t.values()))
    t["cpu"] = cpu_s
    return t


def _median(dicts):
    return {k: float(np.median([d[k] for d in dicts])) for k in dicts[0]}


def run_model(name, folder, sizes, rounds, target="llvm"):
    model, swept = _load(name, folder)
    shapes = _shapes(model, sizes, swept)
    dyn, static, dyn_kernels, variants, dyn_fams, static_fams = [], [], [], set(), [], []
    cold_build(model, _static_dims(model, shapes[0]), target)      # the process's first build
    for _ in range(rounds):
        cpu_s, ph = profile_build(model, None, target)
        dyn.append(_with_outside(cpu_s, ph))
        dyn_kernels.append(ph.per_kernel())
        dyn_fams.append(ph.families())
        variants |= ph.variants
        builds = [profile_build(model, _static_dims(model, s), target) for s in shapes]
        sides = [_with_outside(*b) for b in builds]
        static.append({k: float(np.mean([t[k] for t in sides])) for k in sides[0]})
        fams = [b[1].families() for b in builds]
        static_fams.append({f: float(np.mean([c[f] for c in fams])) for f in set().union(*fams)})
    d, s = _median(dyn), _median(static)
    print(f"\n{name}: dynamic build, kernel by kernel (ms, median of {rounds}; * a size-class variant)")
    print(f"  {'kernel':48s}" + "".join(f"{p:>8s}" for p in PHASES) + f"{'total':>8s}")
    names = sorted(dyn_kernels[0], key=lambda k: -sum(dyn_kernels[0][k].values()))
    for k in names:
        row = _median([r[k] for r in dyn_kernels if k in r])
        mark = "*" if k in variants else " "
        print(f"  {mark}{k:47s}" + "".join(f"{row[p] * 1e3:8.1f}" for p in PHASES) +
              f"{sum(row.values()) * 1e3:8.1f}")
    var_s = float(np.median([sum(sum(r[k].values()) for k in r if k in variants) for r in dyn_kernels]))
    print(f"{name}: phases, dynamic against static (the mean over sizes {', '.join('x'.join(map(str, x)) for x in shapes)})")
    print(f"  {'phase':16s} {'dynamic ms':>11s} {'static ms':>10s} {'extra ms':>9s} {'dyn/static':>10s}")
    for p, dv, sv, extra, ratio in summary(d, s):
        print(f"  {p:16s} {dv * 1e3:11.1f} {sv * 1e3:10.1f} {extra * 1e3:9.1f} {ratio:10.2f}")
    print(f"  size-class variants: {len(variants)} kernels, {var_s * 1e3:.1f} ms, "
          f"{var_s / d['cpu'] * 100:.0f}% of the dynamic build's CPU")
    print(f"{name}: kernel families (a kernel with its variants), dynamic against static")
    print(f"  {'family':40s} {'dynamic ms':>11s} {'static ms':>10s} {'extra ms':>9s} {'dyn/static':>10s}")
    fams = set().union(*dyn_fams, *static_fams)
    df = {f: float(np.median([c.get(f, 0.0) for c in dyn_fams])) for f in fams}
    sf = {f: float(np.median([c.get(f, 0.0) for c in static_fams])) for f in fams}
    for f in sorted(fams, key=lambda f: -(df[f] - sf[f])):
        ratio = f"{df[f] / sf[f]:10.2f}" if sf[f] > 0 else f"{'-':>10s}"
        print(f"  {f:40s} {df[f] * 1e3:11.1f} {sf[f] * 1e3:10.1f} {(df[f] - sf[f]) * 1e3:9.1f} {ratio}")
    sys.stdout.flush()
    return d, s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", help="comma-separated zoo names or bench/dynamic.py's HELPER networks")
    ap.add_argument("--models", dest="folder", default="/tmp/dyn",
                    help="folder of exports NAME.onnx (bench/dynamic.py's); else zoo.export")
    ap.add_argument("--sizes", default="", help="static sizes, e.g. 1x1,1x128,8x128 (default: the sweep's)")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        run_model(name, args.folder, args.sizes, args.rounds)


if __name__ == "__main__":
    main()
