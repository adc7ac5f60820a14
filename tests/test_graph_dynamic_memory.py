"""The memory of a network with symbolic sizes at its first call at new sizes: the size
expressions evaluated without sympy (ir/dims.py), buffers that grow in place
(host_buffer.py) and outputs of every size sharing one buffer (sizes.Slot), with the
outputs a caller keeps never written again; after `reserve`, a first call at new sizes
faults no fresh page in (arena, outputs, the values of the sizes alone and the kernels'
scratch). Results are compared with onnxruntime."""
import random
import resource

import numpy as np
import pytest
import sympy

import tdsl.graph as G
from tdsl.graph import models
from tdsl.graph.host_buffer import GrowingBuffer
from tdsl.graph.ir import dims
from tdsl.runtime import threadpool
from test_graph_dynamic import causal_mask_model
from fresh_interpreter import run_fresh

pytest.importorskip("onnxruntime")


def _close(out, ref):
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def test_size_expressions_evaluate_as_sympy_does():
    b, s, n, mx = (dims.size_var(v) for v in ("batch", "sequence", "L", "max"))
    exprs = [b * s * 768, (n - 3) // 2 + 1, sympy.floor((n - 5) / 4) + 1, sympy.ceiling(n / 3),
             sympy.Mod(n, 4) + b, sympy.Max(s, 3) * b, sympy.Min(s, 7), (3 * n - 1) // 5 * b,
             2 * mx, b ** 2 * s, dims.parse_dim("floor((L - 1)/2) + 1")]
    rng = random.Random(0)
    for e in exprs:
        for _ in range(100):
            sizes = {"batch": rng.randint(1, 64), "sequence": rng.randint(1, 600),
                     "L": rng.randint(8, 50000), "max": rng.randint(1, 9)}
            ref = int(e.xreplace({v: sympy.Integer(sizes[v.name]) for v in e.free_symbols}))
            assert dims.evaluate(e, sizes) == ref, (e, sizes)
    # sizes keyed by symbol, a missing size, a value that is not an integer
    assert dims.evaluate(b * s, {b: 3, s: 5}) == 15
    with pytest.raises(G.GraphError, match="sequence"):
        dims.evaluate(b * s, {"batch": 2})
    with pytest.raises(G.GraphError, match="not an integer"):
        dims.evaluate(sympy.Rational(1, 2) * b, {"batch": 3})


def test_growing_buffer_keeps_its_pages_and_moves_when_a_view_is_held():
    buf = GrowingBuffer()
    a = buf.grow(1 << 20)
    a[:16] = 7
    del a
    a = buf.grow(3 << 20)          # no view held: grown in place, contents kept
    assert buf.nbytes >= 3 << 20 and a.nbytes == buf.nbytes and (a[:16] == 7).all()
    view = a[:16]
    del a
    b = buf.grow(8 << 20)          # a view held: a new mapping, the view's memory untouched
    b[:16] = 1
    assert (view == 7).all() and np.shares_memory(b, buf.array) and not np.shares_memory(view, buf.array)
    assert buf.grow(4 << 20) is b  # large enough already


def _mlp():
    m = models.mlp(batch="batch", sizes=(64, 48, 10))
    return m, G.build(G.optimize(G.from_onnx(m)))


def _x(n, seed):
    return np.random.default_rng(seed).standard_normal((n, 64)).astype(np.float32)


def test_outputs_a_caller_keeps_are_never_written_by_another_size():
    m, exe = _mlp()
    sizes = [8, 8, 3, 16, 3, 5, 8, 2]
    kept = []
    for i, n in enumerate(sizes):
        x = _x(n, i)
        kept.append((exe.run(x)[0], models.onnxruntime_run(m, {"input": x})[0]))
        if i % 3 == 2:      # drop some: their memory may be written again
            kept[-1] = (None, None)
        for out, ref in kept:
            if out is not None:
                _close(out, ref)


def test_kept_outputs_never_share_a_buffer_and_known_sizes_skip_the_full_check(monkeypatch):
    """A caller that keeps every output: each call's outputs go to a buffer no kept one
    lies in. At sizes seen before, binding the kernels to it takes the signature's short
    check (no full `bind`); at new sizes the full checks bind the new sizes. Every output kept stays
    what onnxruntime computes for its input, and no two kept outputs share memory."""
    from tdsl.runtime.signature import Signature
    m, exe = _mlp()
    for k, _, _ in exe.steps:       # kernels are shared with earlier builds of the net
        for sig in [k.module.signature] + [v.module.signature for _, v in k.variants]:
            if sig.known is not None:
                sig.known.clear()
    full = []
    real = Signature.bind
    monkeypatch.setattr(Signature, "bind", lambda self, *a, **k: full.append(self.name) or real(self, *a, **k))
    kept = []
    for i, n in enumerate([8, 8, 8, 3, 3, 8, 3, 8]):
        x = _x(n, i)
        before = len(full)
        y = exe.run(x)[0]
        if i in (0, 3):              # new sizes: a new state, its kernels fully checked
            assert len(full) > before
        else:                        # sizes bound before: no full check
            assert len(full) == before, full[before:]
        assert all(not np.shares_memory(y, k) for k, _ in kept)
        kept.append((y, models.onnxruntime_run(m, {"input": x})[0]))
        for out, ref in kept:
            _close(out, ref)


def test_a_slice_of_an_output_the_caller_keeps_is_never_written_again():
    """A caller that keeps only a view of an output (`logits = exe.run(x)[0][:, -1]`)
    holds its memory as much as one keeping the output itself: no later call, at the
    same sizes or others, writes it."""
    m, exe = _mlp()
    kept = []
    for i, n in enumerate([8, 8, 8, 3, 8, 16, 8]):
        x = _x(n, 300 + i)
        kept.append((exe.run(x)[0][1:3, 2:], models.onnxruntime_run(m, {"input": x})[0][1:3, 2:]))
        for out, ref in kept:
            _close(out, ref)


def test_a_server_of_a_few_sizes_holding_its_last_output_binds_no_kernel_again(monkeypatch):
    """Requests of a few sizes in turn, each output held while the next call runs: once
    each size has run on both output buffers, no call binds a kernel again or makes a
    state (the states of other sizes stay, moving between the buffers with the
    bindings they had there), and every output stays right."""
    from tdsl.graph import runstate
    m, exe = _mlp()
    exe.reserve(batch=20)       # no growth below: a grown buffer drops every state
    binds = []
    real = runstate.HostMemory.bind
    monkeypatch.setattr(runstate.HostMemory, "bind", lambda self, *a: binds.append(1) or real(self, *a))
    y = None
    for i, n in enumerate([8, 3, 20] * 5):
        x = _x(n, 500 + i)
        before = len(binds)
        y = exe.run(x)[0]
        if i >= 6:
            assert len(binds) == before, (i, n)
        _close(y, models.onnxruntime_run(m, {"input": x})[0])


def test_a_new_size_below_the_largest_reuses_the_memory():
    m, exe = _mlp()
    for n in (32, 4, 17, 9):
        x = _x(n, n)
        _close(exe.run(x)[0], models.onnxruntime_run(m, {"input": x})[0])
        slot = exe._slots.default
        if n == 32:
            arena, outputs = slot.arena.ctypes.data, slot.outputs.ctypes.data
        # the outputs were dropped: sizes up to 32 run in the same memory
        assert slot.arena.ctypes.data == arena and slot.outputs.ctypes.data == outputs


def test_a_loop_holding_its_last_output_alternates_between_two_buffers():
    """`y = exe.run(x)` holds the last output while the next call runs: the state that
    runs moves its outputs to the other buffer (reserve paged in both), and back once the caller
    dropped what it held there; the held output keeps its values whatever size runs
    next. Outputs kept longer (a list of them) are never written again, and once
    dropped their memory serves again: the buffers follow what is held, not the calls."""
    m, exe = _mlp()
    exe.reserve(batch=32)
    slot = exe._slots.default
    buffers, prev = set(), None
    for i, n in enumerate([8, 8, 20, 3, 3, 32, 8, 20, 20, 1]):
        x = _x(n, i)
        y = exe.run(x)[0]
        if prev is not None:
            _close(*prev)           # written by no later call
        ref = models.onnxruntime_run(m, {"input": x})[0]
        _close(y, ref)
        assert np.shares_memory(y, slot.outputs)    # until the next call leaves it
        buffers.add(slot.outputs.ctypes.data)
        prev = (y, ref)
    assert len(buffers) == 2, buffers
    kept = []
    for i, n in enumerate([8, 20, 20, 3, 32, 8, 8]):
        x = _x(n, 100 + i)
        kept.append((exe.run(x)[0], models.onnxruntime_run(m, {"input": x})[0]))
        for out, ref in kept:
            _close(out, ref)
        _states_only_in_kept_buffers(slot)
    del kept, y, prev
    buffers = set()
    for i, n in enumerate([8, 20, 8, 3, 3]):
        x = _x(n, 200 + i)
        y = exe.run(x)[0]
        _close(y, models.onnxruntime_run(m, {"input": x})[0])
        buffers.add(slot.outputs.ctypes.data)
        _states_only_in_kept_buffers(slot)
    assert len(buffers) == 2, buffers


def _states_only_in_kept_buffers(slot):
    """A buffer the outputs left and the slot no longer keeps (beyond MAX_LEFT, or
    released once free) holds no state of the slot: such a state would keep its memory
    alive and move out of it at every call."""
    kept = slot._out.arrays()
    stale = [k for k, st in slot.states.items() if not any(st.mem.outputs is a for a in kept)]
    assert not stale, stale


def test_reserve_pages_in_the_memory_of_the_sizes_given():
    m, exe = _mlp()
    exe.reserve(batch=24)
    slot = exe._slots.default
    arena, outputs = slot.arena.ctypes.data, slot.outputs.ctypes.data
    for n in (24, 1, 13):
        x = _x(n, n)
        _close(exe.run(x)[0], models.onnxruntime_run(m, {"input": x})[0])
        assert slot.arena.ctypes.data == arena and slot.outputs.ctypes.data == outputs
    x = _x(40, 40)      # beyond what was reserved: grows, and stays right
    _close(exe.run(x)[0], models.onnxruntime_run(m, {"input": x})[0])
    for bad, match in (({"batch": 0}, "outside its bounds"), ({"seq": 4, "batch": 2}, "unknown: seq"),
                       ({}, "missing: batch"), ({"batch": 2.5}, "integer")):
        with pytest.raises(G.GraphError, match=match):
            exe.reserve(**bad)


def _minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def first_calls_after_reserve():
    """A 1-D CNN with symbolic batch and signal length, as bench/dynamic.py sweeps it (its
    convolutions take heap scratch sized by the signal): after `reserve`, first calls at
    new sizes map no scratch and fault fewer than 24 pages in, and match onnxruntime."""
    m = models.conv1d_net()
    dims_ = m.graph.input[0].type.tensor_type.shape.dim
    for ax, name in ((0, "batch"), (2, "signal")):
        dims_[ax].ClearField("dim_value")
        dims_[ax].dim_param = name
    m.graph.output[0].type.tensor_type.ClearField("shape")
    exe = G.build(G.optimize(G.from_onnx(m)))
    before = threadpool.scratch_stats()
    exe.reserve(batch=2, signal=16000)
    # reserve ran the network: its scratch is mapped (or served by blocks kept before)
    after = threadpool.scratch_stats()
    assert after["mapped"] + after["reused"] > before["mapped"] + before["reused"]
    mapped = threadpool.scratch_stats()["mapped"]
    for shape in ((1, 1, 9000), (2, 1, 12000), (2, 1, 16000), (1, 1, 4000)):
        x = np.random.default_rng(shape[2]).standard_normal(shape).astype(np.float32)
        faults = _minor_faults()
        out = exe.run(x)[0]
        faults = _minor_faults() - faults
        # arena, outputs and scratch were paged in by reserve: what faults is the new run
        # state's few Python objects (without reserve the first of these calls faulted ~50
        # pages in, the second ~100)
        assert threadpool.scratch_stats()["mapped"] == mapped and faults < 24, (shape, faults)
        _close(out, models.onnxruntime_run(m, {"input": x})[0])
        del out


@pytest.mark.skipif(not threadpool.load_into_jit(), reason="no C compiler: kernels' scratch is libc's")
def test_after_reserve_a_first_call_at_new_sizes_touches_no_fresh_memory():
    run_fresh("test_graph_dynamic_memory", "first_calls_after_reserve")


def test_values_of_the_sizes_alone_live_in_the_reserved_arena():
    """A causal mask (sequence x sequence, computed once per size with numpy,
    runstate.size_only and size_values.py) is written into the arena reserve paged in,
    not into fresh pages at each new sequence; a size run again after another size's run
    (which wrote over that arena) computes its mask again, and every result stays right.
    Its intermediates live in the workspace reserve's run grew (size_scratch.py), not in
    numpy's temporaries, which malloc hands back to the kernel (the first mask after
    reserve faulted ~750 pages in at 880 with them)."""
    m = causal_mask_model()
    exe = G.build(G.optimize(G.from_onnx(m)))
    exe.reserve(batch=2, sequence=900)
    rng = np.random.default_rng(7)
    for i, shape in enumerate([(2, 880), (1, 700), (2, 880), (1, 640), (1, 700), (2, 880)]):
        x = rng.standard_normal(shape).astype(np.float32)
        faults = _minor_faults()
        out = exe.run(x)[0]
        faults = _minor_faults() - faults
        # a few dozen pages are the process's own (malloc's heap top given back after
        # onnxruntime's run, the runtime's one-time lazy set-up: 28 seen in one run of
        # ten); the mask's numpy temporaries faulted ~750 pages in here before they
        # moved to the workspace
        assert faults < 64, (i, shape, faults)
        _close(out, models.onnxruntime_run(m, {"x": x})[0])
        del out


def first_calls_holding_the_last_output():
    """A server's loop (`y = exe.run(x)`, the last output held while the next call runs)
    over a network whose output is large (128 MiB at the reserved batch): after
    `reserve`, a first call at new sizes writes its outputs to memory reserve paged in,
    the other of the two buffers the loop alternates between, not to fresh pages (which
    without the spare faulted ~50 huge pages in, or ~25000 small ones)."""
    m = models.mlp(batch="batch", sizes=(16, 8192))
    exe = G.build(G.optimize(G.from_onnx(m)))
    exe.reserve(batch=4096)
    y = None
    for i, n in enumerate((1024, 1024, 3072, 2500, 4096, 2500)):
        x = np.random.default_rng(i).standard_normal((n, 16)).astype(np.float32)
        faults = _minor_faults()
        y = exe.run(x)[0]
        faults = _minor_faults() - faults
        assert faults < 24, (n, faults)
        _close(y, models.onnxruntime_run(m, {"input": x})[0])


@pytest.mark.skipif(not threadpool.load_into_jit(), reason="no C compiler: kernels' scratch is libc's")
def test_after_reserve_a_loop_holding_its_last_output_touches_no_fresh_memory():
    run_fresh("test_graph_dynamic_memory", "first_calls_holding_the_last_output")


def test_a_forgotten_size_is_planned_and_bound_again_and_computes_right():
    """Executor.forget_sizes (bench/dynamic.py takes several first calls at one size
    with it) drops that size's plan and run state, nothing else: its next call makes
    them again in the reserved memory, and a state of other sizes run after it still
    computes its values of the sizes again (the forgotten one's mask, written over
    theirs, is what the arena holds)."""
    m = causal_mask_model()
    exe = G.build(G.optimize(G.from_onnx(m)))
    exe.reserve(batch=2, sequence=40)
    rng = np.random.default_rng(11)

    def check(shape):
        v = rng.standard_normal(shape).astype(np.float32)
        _close(exe.run(v)[0], models.onnxruntime_run(m, {"x": v})[0])
    slot = exe._slots.default
    check((1, 33))
    check((1, 31))
    old = slot.states[(1, 31)]
    exe.forget_sizes(batch=1, sequence=31)
    assert (1, 31) not in slot.states and (1, 31) not in exe._plans._items
    assert (1, 33) in slot.states
    check((1, 33))          # after the forgotten size's run, as its last
    check((1, 31))
    assert slot.states[(1, 31)] is not old and (1, 31) in exe._plans._items
    exe.forget_sizes(batch=1, sequence=31)      # forgotten while it ran last
    check((1, 31))
    for shape in [(1, 33), (1, 31), (1, 1), (2, 40), (1, 33)]:
        check(shape)
    with pytest.raises(G.GraphError, match="sequence"):
        exe.forget_sizes(batch=2)
