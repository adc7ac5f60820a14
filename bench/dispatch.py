"""How a host run calls its kernels: from Python one by one (each through ctypes, as every
run did before runtime/callseq.py) against one native call for the whole sequence
(CallSequence.run), in one process, the sides timed in blocks taken in turn
(bench/latency.py `blocks`), beside onnxruntime on the same model and input.

    python bench/dispatch.py                                  # bert, albert, distilbert, 1x1 and 1x16
    python bench/dispatch.py --models bert --sizes 1x1,1x128
    python bench/dispatch.py --models mobilenetv2_blocks,mobilenet_v3_small   # CNNs: static only

Per transformer and size first the dynamic build against the static one, both called
each way (four sides in turn). Then per (model, build, size): the best block of each side
for `exe.run(x)` as a server calls it (the last outputs still held while the next call
runs: bench/dynamic.py `_holding`), the ratio native/Python, and onnxruntime's block.
Then the same executor with every kernel replaced by a function that returns at once
("stubbed"): what is left is the dispatch alone (setting inputs, taking a state, calling
the kernels, handing out the outputs), per run and per kernel, as wall time (best block)
and as the CPU time of the calling thread (least over blocks: on a shared machine the
steadier of the two). The transformers are built twice, with symbolic batch and sequence
(one build for every size) and static at each size; the CNNs static.

Both sides call the same bound kernels: the Python side is the loop the executor ran
before (the worker pool held around it), over the same PreparedCalls.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl.graph as G  # noqa: E402
from tdsl.graph import zoo  # noqa: E402
from tdsl.runtime import ccompiler  # noqa: E402
from tdsl.runtime.callseq import CallSequence  # noqa: E402
from common import add_target_option, print_target, target_from  # noqa: E402
from graph import _ort_session  # noqa: E402
from latency import blocks  # noqa: E402

NATIVE_RUN = CallSequence.run


def side(fn, native):
    """`fn` with the calls run natively or from Python."""
    def call():
        CallSequence.run = NATIVE_RUN if native else CallSequence.run_in_python
        try:
            return fn()
        finally:
            CallSequence.run = NATIVE_RUN
    return call


def holding(fn):
    held = [None]

    def call():
        held[0] = fn()
    return call


def stub_function():
    """(address, library) of `int32_t stub(void) { return 0; }`: called with any number
    of integer arguments, it returns at once (the caller cleans up its arguments)."""
    lib = ccompiler.shared_object({"stub.c": "int stub(void) { return 0; }\n"}, ["-O2"], "the stub")
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(lib)
        f.flush()
        so = ctypes.CDLL(f.name)
    return ctypes.cast(so.stub, ctypes.c_void_p).value, so


def stub_state(state, address):
    """Every kernel call of `state` pointed at the stub (both ways of calling it)."""
    calls = state.calls
    for i, call in enumerate(calls):
        if call.native is None:
            continue
        call.fn = type(call.fn)(address)
        call.native = (address,) + tuple(call.native[1:])
        calls[i] = call


def _state_of(exe):
    pool = exe._pool
    st = pool.take(default=True)
    pool.give(st)
    return st


def measure(label, exe, x, sess, iname, number, repeat, stub):
    run = lambda: exe.run(x)  # noqa: E731
    ort = lambda: sess.run(None, {iname: x})  # noqa: E731
    for got, ref in zip(exe.run(x), sess.run(None, {iname: x})):
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
    py, nat, t_ort = blocks([holding(side(run, False)), holding(side(run, True)), ort], number, repeat)
    st = _state_of(exe)
    n = len(st.calls)
    print(f"{label:34s} {n:4d} {py * 1e3:9.3f} {nat * 1e3:9.3f} {nat / py:6.3f} {t_ort * 1e3:9.3f} "
          f"{py / t_ort:6.2f} {nat / t_ort:6.2f}", end="", flush=True)
    exe.run(x)      # dropped: the state's calls stay as they are while stubbed
    stub_state(st, stub)
    py, nat = blocks([side(run, False), side(run, True)], number * 20, repeat)
    cpy, cnat = thread_cpu([side(run, False), side(run, True)], number * 20, repeat)
    print(f" {py * 1e6:8.1f} {nat * 1e6:8.1f} {(py - nat) * 1e9 / n:7.0f}"
          f" {cpy * 1e6:8.1f} {cnat * 1e6:8.1f} {(cpy - cnat) * 1e9 / n:7.0f}", flush=True)


def thread_cpu(fns, number, repeat):
    """Least CPU seconds of this thread per call of each of `fns`, in blocks taken in
    turn: what a call costs its thread, whoever else had the core meanwhile (a shared
    machine's wall time counts the others' too)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, f in enumerate(fns):
            t0 = time.thread_time()
            for _ in range(number):
                f()
            best[i] = min(best[i], (time.thread_time() - t0) / number)
    return best


def both(label, static, dyn, x, number, repeat):
    """Dynamic against static at one size, each called both ways, the four in turn."""
    fns = [holding(side(lambda e=e: e.run(x), native)) for native in (False, True) for e in (static, dyn)]
    sp, dp, sn, dn = blocks(fns, number, repeat)
    print(f"{label:34s} dynamic/static: Python calls {dp / sp:5.3f} ({sp * 1e3:.3f}, {dp * 1e3:.3f} ms), "
          f"native {dn / sn:5.3f} ({sn * 1e3:.3f}, {dn * 1e3:.3f} ms)", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="bert,albert,distilbert")
    p.add_argument("--sizes", default="1x1,1x16", help="batch x sequence of the transformers")
    p.add_argument("--number", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    add_target_option(p)
    a = p.parse_args(argv)
    target = target_from(a)
    print_target(target)
    import dynamic
    import zoo as zoo_bench
    stub, _lib = stub_function()
    print(f"{'model / build / size':34s} {'kern':>4s} {'py ms':>9s} {'native ms':>9s} {'n/py':>6s} "
          f"{'ort ms':>9s} {'py/ort':>6s} {'n/ort':>6s} {'stub: py us':>8s} {'native us':>8s} "
          f"{'ns/kern':>7s} {'cpu: py us':>8s} {'native':>8s} {'ns/kern':>7s}")
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    for name in a.models.split(","):
        if name in dynamic.HELPER or zoo.example_input(name).dtype != np.int64:
            # a CNN: static, as bench/zoo.py runs it
            model, x = zoo_bench._model_and_input(name)
            sess = _ort_session(model, target.num_cores)
            exe = G.build(G.optimize(G.from_onnx(model), target=target), target=str(target))
            measure(f"{name} static {'x'.join(map(str, x.shape))}", exe, x, sess,
                    sess.get_inputs()[0].name, a.number, a.repeat, stub)
            continue
        model, _ = dynamic._sweep(name)
        sess = _ort_session(model, target.num_cores)
        iname = sess.get_inputs()[0].name
        dyn = G.build(G.optimize(G.from_onnx(model), target=target), target=str(target))
        for shape in sizes:
            x = dynamic._input(model, shape)
            st = G.build(G.optimize(G.from_onnx(model, dims=dynamic._static_dims(model, shape)),
                                    target=target), target=str(target))
            label = "x".join(map(str, shape))
            both(f"{name} {label}", st, dyn, x, a.number, a.repeat)
            measure(f"{name} static {label}", st, x, sess, iname, a.number, a.repeat, stub)
            # stubs only this size's state: the next size's is made with the kernels
            measure(f"{name} dynamic {label}", dyn, x, sess, iname, a.number, a.repeat, stub)


if __name__ == "__main__":
    main()
