"""Fused attention (passes/attention.py, strategy/cpu/attention.py): the exporters'
MatMul -> [Mul] -> [Add mask] -> Softmax -> [Where(IsNaN)] -> MatMul as one `nn.attention`
kernel per block of query rows, against onnxruntime and numpy; the AVX2 build too; and the
shapes it does not take keep the unfused kernels."""
import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.errors import GraphError
from tdsl.graph.ir import Call, Const, Function, Module, TensorType, Var
from tdsl.graph.passes import attention
from tdsl.target import Target

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from attention_models import attention_onnx  # noqa: E402

RNG = np.random.default_rng(5)


def _ops(mod):
    return [n.op for n in mod.main.nodes()]


def _attention_model(B, H, M, N, D, E, scale=None, mask=None, where_nan=False, divide=False):
    return attention_onnx(B, H, M, N, D, E, scale, mask, where_nan=where_nan, divide=divide)


def _feeds(B, H, M, N, D, E):
    return {"q": RNG.standard_normal((B, H, M, D)).astype(np.float32),
            "kt": RNG.standard_normal((B, H, D, N)).astype(np.float32),
            "v": RNG.standard_normal((B, H, N, E)).astype(np.float32)}


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _run(model, feeds, target="llvm"):
    mod = G.optimize(G.from_onnx(model), target=target)
    exe = G.build(mod, target=target)
    return mod, exe.run(**feeds)[0]


@pytest.fixture
def any_keys(monkeypatch):
    """Fused at every sequence length (the pipeline's own threshold is for speed)."""
    monkeypatch.setattr(attention, "MIN_KEYS", 1)


CASES = [
    # (B, H, M, N, D, E, scale, masked, where_nan, divide)
    (1, 4, 1500, 1500, 64, 64, None, False, False, False),    # whisper's, scaled on q before
    (1, 2, 37, 129, 32, 32, 0.125, True, True, False),        # odd rows and keys, bert/gpt2's form
    (2, 3, 20, 53, 16, 48, 8.0, False, False, True),          # t5-like divide, value dim != head dim
    (1, 1, 7, 5, 80, 24, None, True, False, False),           # fewer keys than a vector
    (1, 2, 515, 515, 64, 64, 0.125, True, False, False),      # rows no block divides: shifted
    (1, 1, 3, 40, 16, 16, None, False, False, False),         # fewer rows than any block: guarded
]


@pytest.mark.parametrize("B,H,M,N,D,E,scale,masked,where_nan,divide", CASES)
def test_fused_attention_matches_onnxruntime(any_keys, B, H, M, N, D, E, scale, masked, where_nan, divide):
    mask = RNG.standard_normal((1, H if masked and H > 1 else 1, M, N)).astype(np.float32) if masked else None
    model = _attention_model(B, H, M, N, D, E, scale, mask, where_nan, divide)
    feeds = _feeds(B, H, M, N, D, E)
    if scale is None:
        feeds["q"] *= np.float32(D ** -0.5)
    mod, got = _run(model, feeds)
    assert sum(isinstance(op, Function) and "attention" in op.name for op in _ops(mod)) == 1
    assert not any(isinstance(op, Function) and "softmax" in op.name for op in _ops(mod))
    np.testing.assert_allclose(got, _ort(model, feeds), rtol=2e-5, atol=2e-5)


def test_causal_mask_and_fully_masked_rows(any_keys):
    """A causal mask of -inf (gpt2's) and a row masked whole: softmax is NaN there, which
    where(isnan(p), 0, p) makes a zero output row; numpy's float64 reference agrees."""
    B, H, M, N, D = 1, 2, 33, 33, 16
    mask = np.triu(np.full((M, N), -np.inf, np.float32), 1)[None, None]
    mask[..., 5, :] = -np.inf
    model = _attention_model(B, H, M, N, D, D, 0.25, mask, where_nan=True)
    feeds = _feeds(B, H, M, N, D, D)
    _, got = _run(model, feeds)
    s = feeds["q"].astype(np.float64) @ feeds["kt"] * 0.25 + mask
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True)
    ref = np.where(np.isnan(p), 0.0, p) @ feeds["v"]
    assert np.all(got[:, :, 5] == 0)
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)


def test_avx2_build(any_keys):
    t = Target("llvm -mcpu=haswell")
    if not t.runs_here:
        pytest.skip("this machine cannot run haswell code")
    B, H, M, N, D = 1, 2, 45, 301, 64
    mask = RNG.standard_normal((1, 1, 1, N)).astype(np.float32)
    model = _attention_model(B, H, M, N, D, D, 0.125, mask)
    feeds = _feeds(B, H, M, N, D, D)
    mod, got = _run(model, feeds, "llvm -mcpu=haswell")
    assert any(isinstance(op, Function) and "attention" in op.name for op in _ops(mod))
    np.testing.assert_allclose(got, _ort(model, feeds), rtol=2e-5, atol=2e-5)


def test_short_sequences_keep_the_three_kernels():
    """Below keys_to_fuse keys (bert's 128) the pipeline leaves matmul, softmax, matmul."""
    model = _attention_model(1, 4, 128, 128, 64, 64, 0.125)
    feeds = _feeds(1, 4, 128, 128, 64, 64)
    mod, got = _run(model, feeds)
    names = [op.name for op in _ops(mod) if isinstance(op, Function)]
    assert not any("attention" in n for n in names) and any("softmax" in n for n in names)
    np.testing.assert_allclose(got, _ort(model, feeds), rtol=2e-5, atol=2e-5)


def _graph(q_shape, kt_shape, v_shape, softmax_axis=3, extra_use=False):
    q, kt, v = (Var(n, TensorType(s, "float32")) for n, s in (("q", q_shape), ("kt", kt_shape), ("v", v_shape)))
    s = Call("nn.matmul", [q, kt])
    p = Call("nn.softmax", [s], {"axis": softmax_axis})
    y = Call("nn.matmul", [p, v])
    return Module(Function("main", [q, kt, v], [y, s] if extra_use else [y]))


@pytest.mark.parametrize("case", ["scores_read_elsewhere", "softmax_not_last_axis", "batch_broadcast", "mask_3d"])
def test_shapes_it_does_not_take_stay_unfused(case):
    if case == "scores_read_elsewhere":
        mod = _graph((1, 2, 8, 4), (1, 2, 4, 8), (1, 2, 8, 4), extra_use=True)
    elif case == "softmax_not_last_axis":
        mod = _graph((1, 2, 8, 4), (1, 2, 4, 8), (1, 2, 8, 4), softmax_axis=2)
    elif case == "batch_broadcast":
        mod = _graph((1, 2, 8, 4), (1, 1, 4, 8), (1, 2, 8, 4))
    else:
        # a mask that would broadcast the scores' rows: not the scores' shape
        model = _attention_model(1, 2, 1, 8, 4, 4, 0.5, mask=np.zeros((1, 2, 3, 8), np.float32))
        model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 1
        mod = G.from_onnx(model)
    out = attention.fuse_attention(mod, min_keys=1)
    assert "nn.attention" not in _ops(out)


def test_operator_checks_its_operands():
    q = Var("q", TensorType((1, 2, 8, 4), "float32"))
    kt = Var("kt", TensorType((1, 2, 5, 8), "float32"))
    v = Var("v", TensorType((1, 2, 8, 4), "float32"))
    with pytest.raises(GraphError, match="not \\(B, H, M, D\\)"):
        Call("nn.attention", [q, kt, v])
    kt = Var("kt", TensorType((1, 2, 4, 8), "float32"))
    with pytest.raises(GraphError, match="mask"):
        Call("nn.attention", [q, kt, v, Const(np.zeros((3, 8), np.float32))])
    with pytest.raises(tdsl.TdslError):
        Call("nn.attention", [q, kt])


def test_whisper_encoder_fused_matches_onnxruntime():
    """The zoo's Whisper encoder (1500 frames, two layers) built for the CPU: each layer's
    attention is one kernel, and the network matches onnxruntime."""
    pytest.importorskip("transformers")
    from tdsl.graph import models, zoo
    model = zoo.export("whisper_encoder")
    x = zoo.example_input("whisper_encoder")
    mod = G.optimize(G.from_onnx(model), target="llvm")
    inner = [m.op for n in mod.main.nodes() if isinstance(n.op, Function) for m in n.op.nodes()]
    assert inner.count("nn.attention") == 2 and "nn.softmax" not in inner
    out = G.build(mod, target="llvm").run(x)[0]
    (ref,) = models.onnxruntime_run(model, {"input": x})
    assert float(np.abs(out - ref).max()) <= 1e-4 * float(np.abs(ref).max())


def test_keys_to_fuse_follow_the_l2():
    """Fused from where one head's float32 scores (keys x keys) fill the core's L2."""
    from tdsl.target import Target
    for name in ("llvm -mcpu=haswell", "llvm -mcpu=znver5", "llvm"):
        t = Target(name)
        k = attention.keys_to_fuse(t)
        assert 4 * k * k <= t.cache_bytes(2) < 4 * (k + 1) * (k + 1)
    haswell = Target("llvm -mcpu=haswell")
    if not haswell.caches_from_os:          # on a Haswell-class host its own L2 is read
        assert attention.keys_to_fuse(haswell) == 256
    # from the threshold up the graph fuses, below it the three kernels stay
    for name in ("llvm -mcpu=haswell", "llvm -mcpu=znver5"):
        k = attention.keys_to_fuse(Target(name))
        at = _graph((1, 2, 8, 4), (1, 2, 4, k), (1, 2, k, 4))
        below = _graph((1, 2, 8, 4), (1, 2, 4, k - 1), (1, 2, k - 1, 4))
        assert "nn.attention" in _ops(attention.fuse_attention(at, target=name))
        assert "nn.attention" not in _ops(attention.fuse_attention(below, target=name))
