"""select_partition: a concatenation runs one loop per input. No select over the inputs is
left in the lowered IR, as the kernel's own output and inlined into a consumer (the
graph's definition of concatenate, ragged channel counts), at a static batch (a loop per
input) and a symbolic one (the input chosen once per plane); results equal numpy's."""
from types import SimpleNamespace

import numpy as np
import pytest

import tdsl
from tdsl.graph.strategy import topi
from tdsl.ir import expr as E
from tdsl.ir import stmt as S
from tdsl.ir.visitor import walk

CHANNELS = [1, 3, 17, 32, 5]
RNG = np.random.default_rng(0)


def _concat(batch, axis=1, consumer=False):
    ins = [tdsl.placeholder((batch, c, 3, 20), name=f"x{i}") if axis == 1 else
           tdsl.placeholder((batch, 3, c, 20), name=f"x{i}") for i, c in enumerate(CHANNELS)]
    shape = list(ins[0].shape)
    shape[axis] = sum(CHANNELS)
    token = topi.symbolic_sizes.set(not isinstance(batch, int))
    try:
        cat = topi.concatenate(ins, {"axis": axis}, SimpleNamespace(shape=tuple(shape)))
    finally:
        topi.symbolic_sizes.reset(token)
    if not consumer:
        return ins, [], cat
    scale = tdsl.placeholder((sum(CHANNELS),), name="scale")
    out = tdsl.compute(cat.shape, lambda *i: tdsl.max(cat[i] * scale[i[axis]], tdsl.const(0.0, "float32")),
                       name="scale_relu")
    return ins, [scale], out


def _selects(func):
    """The selects between two reads of memory in `func`, and the loops' variables
    around each (as `for` statements nest)."""
    found = []

    def visit(node, loops):
        if isinstance(node, S.For):
            loops = loops + [node]
        if isinstance(node, E.Select):
            reads = [[], []]
            for side, part in zip(reads, (node.t, node.f)):
                walk(part, lambda n, side=side: side.append(n) if isinstance(n, E.BufferLoad) else None)
            if all(reads):
                found.append((node, loops))
        for f in node.__dataclass_fields__:
            v = getattr(node, f)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, (E.Expr, S.Stmt)) and not isinstance(x, E.Var):
                    visit(x, loops)
    visit(func.body, [])
    return found


def _inputs_per_store(func, ins):
    """For each store, the concatenation's inputs its value reads."""
    names = {t.op.name for t in ins}
    out = []

    def store(n):
        if isinstance(n, S.BufferStore):
            read = set()
            walk(n.value, lambda m: read.add(m.buffer.name) if isinstance(m, E.BufferLoad) and m.buffer.name in names else None)
            out.append(read)
    walk(func.body, store)
    return out


def _run(ins, extra, out, batch, sched):
    f = tdsl.build(sched, ins + extra + [out], target="llvm")
    n = 2 if not isinstance(batch, int) else batch
    xs = [RNG.standard_normal([n if isinstance(d, E.Var) else int(d) for d in t.shape]).astype(np.float32)
          for t in ins + extra]
    res = tdsl.nd.empty(tuple(n if isinstance(d, E.Var) else int(d) for d in out.shape), "float32")
    f(*[tdsl.nd.array(x) for x in xs], res)
    return xs, res.numpy()


@pytest.mark.parametrize("axis", [1, 2])
@pytest.mark.parametrize("consumer", [False, True], ids=["own output", "inlined"])
def test_static_concat_has_a_loop_per_input(axis, consumer):
    ins, extra, out = _concat(4, axis, consumer)
    s = tdsl.auto_schedule(out, "llvm")
    func = tdsl.lower(s, ins + extra + [out])
    assert not _selects(func)
    xs, got = _run(ins, extra, out, 4, s)
    want = np.concatenate(xs[:len(ins)], axis=axis)
    if consumer:
        shape = [1] * 4
        shape[axis] = -1
        want = np.maximum(want * xs[-1].reshape(shape), 0)
    np.testing.assert_array_equal(got, want)
    # a loop nest per input: each store copies from one input
    per_store = _inputs_per_store(func, ins)
    assert all(len(r) == 1 for r in per_store)
    assert set().union(*per_store) == {t.op.name for t in ins}


@pytest.mark.parametrize("consumer", [False, True], ids=["own output", "inlined"])
def test_symbolic_batch_concat_chooses_per_plane(consumer):
    """The auto-scheduler fuses a run-time batch with the channels (one parallel loop of
    batch * channels): the input is chosen once per plane, outside the vector loops."""
    n = tdsl.size_var("n")
    ins, extra, out = _concat(n, 1, consumer)
    s = tdsl.auto_schedule(out, "llvm")
    func = tdsl.lower(s, ins + extra + [out])
    assert not _selects(func)
    ifs = []
    walk(func.body, lambda x: ifs.append(x) if isinstance(x, S.IfThenElse) else None)
    assert len(ifs) >= len(CHANNELS) - 1
    assert all(len(r) == 1 for r in _inputs_per_store(func, ins))
    xs, got = _run(ins, extra, out, n, s)
    want = np.concatenate(xs[:len(ins)], axis=1)
    if consumer:
        want = np.maximum(want * xs[-1].reshape(1, -1, 1, 1), 0)
    np.testing.assert_array_equal(got, want)


def test_padding_select_is_left_alone():
    """A select with a constant side (padding) is not a concatenation: its loop stays one."""
    x = tdsl.placeholder((8, 16), name="x")
    pad = tdsl.compute((10, 16), lambda i, j: tdsl.if_then_else(tdsl.all(i >= 1, i < 9), x[i - 1, j],
                                                                   tdsl.const(0.0, "float32")), name="pad")
    s = tdsl.create_schedule(pad)
    func = tdsl.lower(s, [x, pad])
    loops = []
    walk(func.body, lambda n: loops.append(n) if isinstance(n, S.For) and n.var.name == "i" else None)
    assert len(loops) == 1


def test_parallel_channel_loop_keeps_one_fork():
    """Cutting a parallel loop would fork once per input: its body is unswitched instead."""
    ins, extra, out = _concat(1, 1, consumer=False)
    s = tdsl.create_schedule(out)
    b, c, h, w = s[out].op.axis
    s[out].parallel(c)
    s[out].vectorize(w)
    func = tdsl.lower(s, ins + [out])
    assert not _selects(func)
    forks = []
    walk(func.body, lambda n: forks.append(n) if isinstance(n, S.For) and n.kind is S.ForKind.PARALLEL else None)
    assert len(forks) == 1
    assert all(len(r) == 1 for r in _inputs_per_store(func, ins))
    xs, got = _run(ins, [], out, 1, s)
    np.testing.assert_array_equal(got, np.concatenate(xs, axis=1))
