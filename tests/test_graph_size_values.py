"""The values of the sizes alone (runstate.size_only: a T5's relative position buckets and
bias, a GPT-2's causal mask and position ids) computed with numpy per size
(size_values.py), not compiled: transformers exported with a symbolic batch and sequence,
built once, against onnxruntime at several lengths, with sizes that come back after
others (a state computes its values again after another size's run) and calls of different
sizes from several threads at once."""
import threading

import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import models, zoo
from tdsl.graph.size_values import SizeValue, group_value
from tdsl.graph.ir import Call, Const, Function, Var, TensorType
from tdsl.graph.ir.dims import size_var

pytest.importorskip("onnxruntime")


def _close(out, ref):
    assert out.shape == ref.shape
    assert float(np.abs(out - ref).max()) <= 1e-3 * float(np.abs(ref).max())


@pytest.fixture(scope="module", params=["t5_encoder", "gpt2"])
def built(request):
    pytest.importorskip("transformers")
    model = zoo.export(request.param, dynamic=True)
    exe = G.build(G.optimize(G.from_onnx(model)))
    return request.param, model, exe


def test_size_only_groups_are_numpy_steps(built):
    name, _, exe = built
    values = [k.name for k, _, _ in exe.steps if isinstance(k, SizeValue)]
    # T5: the relative positions, their buckets, the bias gathered from them and
    # broadcast over the batch; GPT-2: the positions, their embeddings, the causal mask
    assert len(values) >= 3, (name, values)
    assert exe.stats["compiled"] + exe.stats["cached"] == len(exe.steps) - len(values)


def test_lengths_1_7_40_and_back_match_onnxruntime(built):
    _, model, exe = built
    rng = np.random.default_rng(11)
    for b, s in [(1, 1), (2, 7), (1, 40), (2, 7), (3, 40), (1, 1)]:
        x = rng.integers(0, 1000, (b, s)).astype(np.int64)
        _close(exe.run(x)[0], models.onnxruntime_run(model, {"input": x})[0])


def test_concurrent_calls_of_different_sizes(built):
    _, model, exe = built
    shapes = [(1, 1), (2, 7), (1, 40), (3, 13)]
    rng = np.random.default_rng(12)
    xs = [rng.integers(0, 1000, s).astype(np.int64) for s in shapes]
    refs = [models.onnxruntime_run(model, {"input": x})[0] for x in xs]
    errors = []

    def work(t):
        try:
            for i in range(6):
                j = (t + i) % len(xs)
                _close(exe.run(xs[j])[0], refs[j])
        except Exception as e:      # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_broadcasts_are_computed_over_what_varies():
    """where(condition broadcast over the batch, x, y): computed once per varying
    element and viewed broadcast (T5's bias over the batch: 32 MB at 8x512), equal to the
    full numpy result."""
    n, b = size_var("sequence"), size_var("batch")
    c = Var("c", TensorType((), "bool"))
    x = Var("x", TensorType((1, 2, n, n), "float32"))
    cond = Call("broadcast_to", [c], {"shape": [b, 1, n, n]})
    out = Call("where", [cond, x, Const(np.array(-1.0, np.float32))])
    fn = Function("g", [c, x], [out])
    xv = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    for flag in (True, False):
        v = group_value(fn, [np.array(flag), xv], {"sequence": 5, "batch": 3})
        assert v.shape == (3, 2, 5, 5) and v.strides[0] == 0
        np.testing.assert_array_equal(v, np.where(np.broadcast_to(flag, (3, 1, 5, 5)), xv, np.float32(-1)))
