"""Where the first call at a size never run before goes (`python bench/firstcall.py gpt2
--sizes 8x128,4x64 --repeat 3 --static`): the attribution of bench/dynamic.py's "first+ms".

The symbolic model is built once and reserved as the sweep does (bench/dynamic.py
`_reserved`: every size is new to it); each repetition first returns it to where it was
before it ran at a size (Executor.forget_sizes: that size's plan and run state dropped,
the reserved memory kept), so that each is a first call there. Then per size, in the
sweep's conditions (onnxruntime's block at that size and a pause), one first call, taken
apart:

- plan: the sizes read and checked, and the memory plan of those sizes evaluated;
- classes: the size-class choice of every kernel (Kernel.at) and the kernels of the sizes
  alone picked (runstate.size_only);
- state: the run state made (buffers bound, kernels prepared, the values of the sizes
  alone computed into the arena);
- kernels: the calls, each timed; "top" names the kernels slower than in a warm call;
- rest: setting the input, handing the outputs out;

each with its minor page faults (getrusage, every thread of the process); the Python
collections that ran in the call (generation, ms); and the seconds tdsl's threads (the
caller and the worker pool) spent runnable but waiting for a core (/proc schedstat: the
machine is shared). The warm call is the median of 3, each after one onnxruntime call and
the pause, as in the sweep. With --static, the network built static at that size, run
twice first (its first touch of memory is not the point), is measured the same way: what
its first call pays beyond a warm one is the state of caches and machine that
onnxruntime's block left, not tdsl's work at a new size.

Timing the phases wraps the executor's own steps (the methods a first call goes through),
so the calls here run the same code as `Executor.run`, each phase timed around it.
"""
from __future__ import annotations

import argparse
import gc
import resource
import time


import tdsl.graph as G
from dynamic import _input, _reserved, _static_dims, _sweep
from graph import _ort_session
from latency import _threads, blocks, delays, waited_between


def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class _Phases:
    """Seconds and minor faults per phase of the calls made while `on`, and the Python
    collections that ran."""

    def __init__(self):
        self.t, self.gcs, self._gc_t0 = {}, [], 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase, info):
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self.gcs.append((info["generation"], time.perf_counter() - self._gc_t0))

    def clear(self):
        self.t, self.gcs = {}, []

    def timed(self, key, fn, *a, **k):
        t0, f0 = time.perf_counter(), _faults()
        try:
            return fn(*a, **k)
        finally:
            s, f = self.t.get(key, (0.0, 0))
            self.t[key] = (s + time.perf_counter() - t0, f + _faults() - f0)

    def wrap(self, obj, attr, key):
        fn = getattr(obj, attr)
        setattr(obj, attr, lambda *a, **k: self.timed(key, fn, *a, **k))


def _instrument(exe, ph):
    """Times the phases of `exe`'s first calls (see the module's docstring)."""
    if exe.binder is None:
        return
    ph.wrap(exe._plans, "_compute", "plan")
    ph.wrap(exe, "steps_at", "classes")
    ph.wrap(exe, "_make_sized", "state")


# with --hold: the outputs of the last call, kept while the next call runs
_held = [None]


def _call(exe, ph, x, hold=False):
    """One call of `exe` on `x` as Executor.run makes it, its phases timed; returns the
    seconds of each kernel call. `hold`: its outputs are kept until the next call has
    run, as a server's `y = exe.run(x)` keeps them (and bench/dynamic.py's blocks)."""
    pool = ph.timed("pool", exe._pool_for, [x], {})
    state = pool.take()
    per = []
    try:
        ph.timed("rest", exe._set, state, exe.input_names[0], x)
        t0, f0 = time.perf_counter(), _faults()
        for call in state.calls:
            t1 = time.perf_counter()
            call()
            per.append(time.perf_counter() - t1)
        ph.t["kernels"] = (time.perf_counter() - t0, _faults() - f0)
        out = ph.timed("rest", state.hand_out)
    finally:
        pool.give(state)
    _held[0] = out if hold else None
    del out
    names = [k.name for k, _, _ in getattr(pool, "steps", exe.steps)]
    return per, names


def _phases_text(t):
    """The phases of one call: "pool" (the sizes read, the pool of those sizes found or
    made) holds "plan" and "classes"; "state" is taken from the pool after it."""
    def ms(k):
        s, f = t.get(k, (0.0, 0))
        return f"{s * 1e3:.2f} ms/{f} flt"
    return (f"sizes {ms('pool')} (plan {ms('plan')}, classes {ms('classes')}), state {ms('state')}, "
            f"kernels {ms('kernels')}, input+outputs {ms('rest')}")


def measure(exe, x, sess, iname, ph, threads, pause_s=0.3, hold=False):
    """(first s, warm s, lines) of `exe` at `x`'s size, in the sweep's conditions;
    `hold`: every call runs while the last one's outputs are held."""
    blocks([lambda: sess.run(None, {iname: x})], 10, 1)
    time.sleep(pause_s)
    ph.clear()
    w0, f0, t0 = delays(threads), _faults(), time.perf_counter()
    per_first, names = _call(exe, ph, x, hold)
    first, faults = time.perf_counter() - t0, _faults() - f0
    waited, phases, gcs = waited_between(w0, delays(threads)), dict(ph.t), list(ph.gcs)
    warm = []
    for _ in range(3):
        sess.run(None, {iname: x})
        time.sleep(pause_s)
        ph.clear()
        t0 = time.perf_counter()
        per = _call(exe, ph, x, hold)[0]
        warm.append((time.perf_counter() - t0, per))
    warm.sort(key=lambda w: w[0])
    w, per_warm = warm[1]
    slower = sorted(((a - b, i) for i, (a, b) in enumerate(zip(per_first, per_warm))), reverse=True)[:3]
    lines = [f"first {first * 1e3:.1f} ms ({faults} flt), warm {w * 1e3:.1f} ms: +{(first - w) * 1e3:.1f} ms; "
             f"tdsl's threads waited for a core {waited * 1e3:.1f} ms; collections "
             + (", ".join(f"gen{g} {d * 1e3:.1f} ms" for g, d in gcs) or "none"),
             f"    {_phases_text(phases)}; kernels first-warm {(sum(per_first) - sum(per_warm)) * 1e3:+.1f} ms, top "
             + ", ".join(f"{names[i]} {d * 1e3:+.1f}" for d, i in slower)]
    return first, w, lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a zoo model or a bench/dynamic.py helper network")
    p.add_argument("--sizes", default="", help="input shapes, 8x128,4x64 (default: the sweep's)")
    p.add_argument("--repeat", type=int, default=2, help="first calls per size, each new to the executor")
    p.add_argument("--static", action="store_true", help="also the static build at each size")
    p.add_argument("--hold", action="store_true",
                   help="each call runs while the last call's outputs are held (y = exe.run(x))")
    a = p.parse_args()
    model, sweep = _sweep(a.model)
    shapes = [tuple(map(int, s.split("x"))) for s in a.sizes.split(",") if s] or sweep
    reserved = _reserved(model, sweep)
    before = set(_threads())
    sess = _ort_session(model, 2)
    iname = sess.get_inputs()[0].name
    ort_threads = set(_threads()) - before
    ph = _Phases()
    statics = {}
    if a.static:
        for shape in shapes:
            st = G.build(G.optimize(G.from_onnx(model, dims=_static_dims(model, shape))))
            x = _input(model, shape)
            st.run(x)
            st.run(x)
            statics[shape] = st
    t0 = time.perf_counter()
    exe = G.build(G.optimize(G.from_onnx(model)))
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    exe.reserve(**reserved)
    print(f"{a.model}: built in {built:.2f} s (cached kernels), reserved "
          f"{', '.join(f'{k}={v}' for k, v in reserved.items())} in {time.perf_counter() - t0:.2f} s",
          flush=True)
    _instrument(exe, ph)
    # tdsl's threads: this one and the worker pool's (started by reserve's run), not
    # onnxruntime's, whose spinning workers wait for a core by design
    threads = [t for t in _threads() if t not in ort_threads]
    for rep in range(a.repeat):
        print(f"{a.model} repetition {rep + 1}", flush=True)
        for shape in shapes:
            x = _input(model, shape)
            exe.forget_sizes(**_static_dims(model, shape))     # each first call new to it
            for label, ex in [("dynamic", exe)] + ([("static", statics[shape])] if a.static else []):
                _, _, lines = measure(ex, x, sess, iname, ph, threads, hold=a.hold)
                print(f"  {'x'.join(map(str, shape)):>14s} {label:8s} " + "\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
