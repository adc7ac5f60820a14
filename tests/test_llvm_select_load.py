"""codegen/llvm/select_load.py: a concatenation's chain of selects over its inputs is one
load from a chosen address. Results equal numpy's (the graph's definition of concatenate,
ragged channel counts, along the channels and the rows, as the kernel's output and inlined
into a consumer, at a static and a run-time batch); the LLVM code has one body whatever the
number of inputs: its loads do not grow with them, and the choice is a select of pointers,
not a branch per input."""
import re
from types import SimpleNamespace

import numpy as np
import pytest

import tdsl
from tdsl.codegen import llvm
from tdsl.graph.strategy import topi
from tdsl.ir import expr as E

CHANNELS = [1, 3, 17, 32, 5]
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    # the assertions read the code this tree generates, not a cached module
    monkeypatch.setenv("TDSL_CACHE", "0")


def _concat(batch, chans=CHANNELS, axis=1, consumer=False):
    ins = [tdsl.placeholder((batch, c, 3, 20), name=f"x{i}") if axis == 1 else
           tdsl.placeholder((batch, 3, c, 20), name=f"x{i}") for i, c in enumerate(chans)]
    shape = list(ins[0].shape)
    shape[axis] = sum(chans)
    token = topi.symbolic_sizes.set(not isinstance(batch, int))
    try:
        cat = topi.concatenate(ins, {"axis": axis}, SimpleNamespace(shape=tuple(shape)))
    finally:
        topi.symbolic_sizes.reset(token)
    if not consumer:
        return ins, [], cat
    scale = tdsl.placeholder((sum(chans),), name="scale")
    out = tdsl.compute(cat.shape, lambda *i: tdsl.max(cat[i] * scale[i[axis]], tdsl.const(0.0, "float32")),
                       name="scale_relu")
    return ins, [scale], out


def _build(ins, extra, out):
    return tdsl.build(tdsl.auto_schedule(out, "llvm"), ins + extra + [out], target="llvm")


def _run(f, ins, extra, out, n):
    xs = [RNG.standard_normal([n if isinstance(d, E.Var) else int(d) for d in t.shape]).astype(np.float32)
          for t in ins + extra]
    res = tdsl.nd.empty(tuple(n if isinstance(d, E.Var) else int(d) for d in out.shape), "float32")
    f(*[tdsl.nd.array(x) for x in xs], res)
    return xs, res.numpy()


@pytest.mark.parametrize("batch", [4, "n"], ids=["static", "symbolic"])
@pytest.mark.parametrize("axis", [1, 2])
@pytest.mark.parametrize("consumer", [False, True], ids=["own output", "inlined"])
def test_concat_equals_numpy(batch, axis, consumer):
    if batch == "n":
        batch = tdsl.size_var("n")
    ins, extra, out = _concat(batch, CHANNELS, axis, consumer)
    f = _build(ins, extra, out)
    for n in ([batch] if isinstance(batch, int) else [1, 3]):
        xs, got = _run(f, ins, extra, out, n)
        want = np.concatenate(xs[:len(ins)], axis=axis)
        if consumer:
            shape = [1] * 4
            shape[axis] = -1
            want = np.maximum(want * xs[-1].reshape(shape), 0)
        np.testing.assert_array_equal(got, want)


def _shape(chans, batch):
    """(loads, pointer selects, branches on a select) in the LLVM IR as generated (LLVM's
    own unrolling and unswitching would make the counts depend on its cost model)."""
    ins, extra, out = _concat(batch, chans, 1, consumer=True)
    ll, _, _ = llvm.codegen(tdsl.lower(tdsl.auto_schedule(out, "llvm"), ins + extra + [out]))
    loads = len(re.findall(r"= load <|= call .*@\"llvm\.masked\.load", ll))
    ptr_selects = len(re.findall(r"select\s+i1 [^,]+, ptr ", ll))
    return loads, ptr_selects, ll.count("sel.t")


@pytest.mark.parametrize("batch", [4, "n"], ids=["static", "symbolic"])
def test_one_body_whatever_the_number_of_inputs(batch):
    """Two inputs and eight of the same total (the same schedule): one vector load (one
    body), the choice among the inputs a chain of pointer selects (one per input but the
    last), no branch on it."""
    if batch == "n":
        batch = tdsl.size_var("n")
    few, many = [64, 64], [16, 8, 24, 16, 16, 8, 24, 16]
    (loads_few, sel_few, br_few), (loads_many, sel_many, br_many) = _shape(few, batch), _shape(many, batch)
    assert loads_few == loads_many == 1
    assert (sel_few, sel_many) == (len(few) - 1, len(many) - 1)
    assert br_few == br_many == 0


@pytest.mark.parametrize("vectorize", [False, True], ids=["scalar", "vector"])
def test_plain_schedule_equals_numpy(vectorize):
    """Serial loops as written (each element's input chosen in the innermost loop, a scalar
    load) and a vectorized row: one pointer chain, values as numpy's."""
    ins, _, out = _concat(2)
    s = tdsl.create_schedule(out.op)
    if vectorize:
        s[out].vectorize(s[out].op.axis[3])
    ll, _, _ = llvm.codegen(tdsl.lower(s, ins + [out]))
    assert len(re.findall(r"select\s+i1 [^,]+, ptr ", ll)) == len(CHANNELS) - 1
    xs, got = _run(tdsl.build(s, ins + [out], target="llvm"), ins, [], out, 2)
    np.testing.assert_array_equal(got, np.concatenate(xs, axis=1))
