"""Fused attention with symbolic sizes (passes/attention.py, strategy/cpu/attention.py): a
network exported with a symbolic batch and sequence, built once, runs `nn.attention` as
the blocked kernel from SHORT_KEYS keys (row blocks with a run-time tail, keys a
run-time extent, each block's scores in scratch sized per call) and its variants of the
plain stages below (at a single key, with the key count a constant), against onnxruntime
and numpy;
masks as inputs (padding, causal); threads calling at different sizes at once; and the
bounds under which a dynamic build keeps the three kernels."""
import threading

import numpy as np
import pytest

import tdsl.graph as G
from tdsl.codegen import llvm
from tdsl.graph.ir import Function
from tdsl.graph.kernel_cache import clear_kernel_cache
from tdsl.graph.strategy.cpu import attention as cpu_attention
from tdsl.target import Target

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from attention_models import attention_onnx  # noqa: E402

RNG = np.random.default_rng(7)
H, D, E = 2, 32, 48


def _model(batch="batch", seq="sequence", mask=None, where_nan=False, rows=None):
    """Self-attention over `seq` keys (`rows` names q's length apart from them: cross-
    attention), scaled by 1/sqrt(D), with a mask input ("padding": (batch, 1, 1, seq);
    "causal": (1, 1, seq, seq))."""
    shape = None if mask is None else (batch, 1, 1, seq) if mask == "padding" else (1, 1, seq, seq)
    return attention_onnx(batch, H, rows or seq, seq, D, E, scale=D ** -0.5, mask_input=shape,
                          where_nan=where_nan)


def _feeds(B, S, mask=None, rows=None):
    feeds = {"q": RNG.standard_normal((B, H, rows or S, D)).astype(np.float32),
             "kt": RNG.standard_normal((B, H, D, S)).astype(np.float32),
             "v": RNG.standard_normal((B, H, S, E)).astype(np.float32)}
    if mask == "padding":
        # each sequence of the batch padded after a different length (at least one token)
        m = np.zeros((B, 1, 1, S), np.float32)
        for b in range(B):
            m[b, ..., max(1, S - 3 * b - 2):] = np.float32(-1e4)
        feeds["mask"] = m
    elif mask == "causal":
        feeds["mask"] = np.triu(np.full((S, S), -np.inf, np.float32), 1)[None, None]
    return feeds


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _build(model, dims=None):
    mod = G.optimize(G.from_onnx(model, dims=dims), target="llvm")
    return mod, G.build(mod, target="llvm")


def _fused(mod):
    return [n.op for n in mod.main.nodes() if isinstance(n.op, Function)
            and any(m.op == "nn.attention" for m in n.op.nodes())]


def _schedules(exe):
    return {k.scheduled_by for k, _, _ in exe.steps}


def _variants(exe):
    """{size class condition: the implementation that scheduled it} of each kernel."""
    return {str(c): v.scheduled_by for k, _, _ in exe.steps for c, v in (k.variants or [])}


# (batch, sequence): one token, fewer keys than a vector, odd lengths, each side of
# SHORT_KEYS (where the blocked kernel's key tile and row blocks start to shift), a
# row-block tail, more keys than the representative size, past MIN_KEYS
SIZES = [(1, 1), (2, 3), (1, 16), (1, 31), (2, 32), (1, 33), (3, 37), (2, 100), (1, 515), (2, 530)]


@pytest.mark.parametrize("mask", [None, "padding"])
def test_symbolic_batch_and_sequence_match_onnxruntime(mask):
    model = _model(mask=mask)
    mod, exe = _build(model)
    (fn,) = _fused(mod)
    assert not any(isinstance(d, int) for d in fn.params[0].type.shape[::2])      # batch, sequence
    # the blocked kernel from SHORT_KEYS keys, the plain stages below (both swept here)
    assert _schedules(exe) == {"attention_blocked"}
    assert _variants(exe) == {"sequence == 1": "attention_one",
                              f"sequence < {cpu_attention.SHORT_KEYS}": "attention_short_keys"}
    for B, S in SIZES:
        feeds = _feeds(B, S, mask)
        np.testing.assert_allclose(exe.run(**feeds)[0], _ort(model, feeds), rtol=2e-5, atol=2e-5,
                                   err_msg=f"batch {B}, sequence {S}")


def _ran(exe):
    """The kernels the last call ran (profile's names, without the step number)."""
    return {name.split("#")[0] for name, _, _ in exe.profile(number=1)}


@pytest.mark.parametrize("mask", [None, "padding"])
def test_one_key_runs_the_one_variant(mask):
    """At one key (a one-token call) the variant with the key count pinned to 1 runs
    (cpu/attention.schedule_one: a batch row's heads and queries a parallel step); two
    and seven keys take the short_keys variant. Each against onnxruntime, self-attention
    (at a batch whose work forks the parallel loop too) and cross-attention (a single key
    against several queries, a few and more than a vector's worth)."""
    for rows, cases in ((None, [(1, 1, "one", None), (3, 1, "one", None), (180, 1, "one", None),
                                (2, 2, "short_keys", None), (1, 7, "short_keys", None)]),
                        ("target", [(2, 1, "one", 5), (3, 1, "one", 37), (1, 7, "short_keys", 5)])):
        model = _model(mask=mask, rows=rows)
        _, exe = _build(model)
        for B, S, cls, R in cases:
            feeds = _feeds(B, S, mask, rows=R)
            np.testing.assert_allclose(exe.run(**feeds)[0], _ort(model, feeds), rtol=2e-5, atol=2e-5,
                                       err_msg=f"batch {B}, sequence {S}, rows {R}")
            ran = [k for k in _ran(exe) if "attention" in k]
            assert len(ran) == 1 and ran[0].endswith("_" + cls), (B, S, ran)


def test_causal_mask_input_with_fully_masked_rows():
    """gpt2's causal mask of -inf and a row masked whole: softmax is NaN there, which
    where(isnan(p), 0, p) zeroes; numpy's float64 reference agrees at each length."""
    model = _model(batch=1, mask="causal", where_nan=True)
    mod, exe = _build(model)
    assert _fused(mod) and _schedules(exe) == {"attention_blocked"}
    for S in (1, 9, 33, 70, 521):
        feeds = _feeds(1, S, "causal")
        feeds["mask"][..., S // 2, :] = -np.inf
        got = exe.run(**feeds)[0]
        s = feeds["q"].astype(np.float64) @ feeds["kt"] * D ** -0.5 + feeds["mask"]
        with np.errstate(invalid="ignore"):
            p = np.exp(s - s.max(-1, keepdims=True))
            p = p / p.sum(-1, keepdims=True)
        ref = np.where(np.isnan(p), 0.0, p) @ feeds["v"]
        assert np.all(got[:, :, S // 2] == 0)
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5, err_msg=f"sequence {S}")


def test_symbolic_batch_over_static_keys():
    """Whisper's form: the batch symbolic, 600 frames fixed; the blocked kernel at every
    batch, with no variant (the keys are a number)."""
    model = _model(seq=600)
    mod, exe = _build(model)
    assert _fused(mod) and _schedules(exe) == {"attention_blocked"} and not _variants(exe)
    for B in (1, 2, 3):
        feeds = _feeds(B, 600)
        np.testing.assert_allclose(exe.run(**feeds)[0], _ort(model, feeds), rtol=2e-5, atol=2e-5)


def _build_seen(model, monkeypatch):
    """_build, compiling afresh, with the blocked kernel's lowered code as text."""
    monkeypatch.setenv("TDSL_CACHE", "0")
    clear_kernel_cache()
    seen, codegen = [], llvm.codegen

    def spy(func, target="llvm"):
        if "attention" in func.name and not func.name.endswith(("_short_keys", "_one")):
            seen.append(str(func))
        return codegen(func, target)
    monkeypatch.setattr(llvm, "codegen", spy)
    mod, exe = _build(model)
    assert len(seen) == 1
    return mod, exe, seen[0]


def _row_tails(text):
    """Loops over a block's query rows that end in a guarded tail."""
    return [ln for ln in text.splitlines() if "pragma tail" in ln and ("i.outer" in ln or "i.inner" in ln)]


def _key_tails(text):
    """Loops over keys of q K^T or exp that end in a guarded tail."""
    return [ln for ln in text.splitlines() if "pragma tail" in ln and "for j." in ln]


def test_self_attention_row_blocks_shift_inwards(monkeypatch):
    """Self-attention's last row block moves back onto the one before (rows computed
    twice, the same both times) rather than running a guarded copy; cross-attention,
    whose queries may be fewer than a block, keeps the guard. Both against onnxruntime
    at lengths that are not a multiple of the block."""
    for rows, sizes in ((None, [(1, 515), (2, 530)]), ("target", [(1, 515, 3), (2, 530, 21), (1, 512, 600)])):
        model = _model(mask="padding", rows=rows)
        mod, exe, text = _build_seen(model, monkeypatch)
        assert _fused(mod) and _schedules(exe) == {"attention_blocked"}
        assert bool(_row_tails(text)) == (rows is not None)
        # the keys' last tile shifts too (at least SHORT_KEYS keys), with scratch of
        # the keys' length: one copy of q K^T's micro-kernel, unguarded
        assert not _key_tails(text) and "likely(j" not in text
        for B, S, *R in sizes:
            feeds = _feeds(B, S, "padding", rows=R[0] if R else None)
            np.testing.assert_allclose(exe.run(**feeds)[0], _ort(model, feeds), rtol=2e-5, atol=2e-5,
                                       err_msg=f"batch {B}, sequence {S}, rows {R}")


def test_threads_calling_at_different_sizes():
    """Each call's block scratch is its own: threads running other sequence lengths at
    once get their own results."""
    model = _model(mask="padding")
    _, exe = _build(model)
    cases = [(B, S, _feeds(B, S, "padding")) for B, S in [(1, 1), (2, 37), (1, 515), (3, 64), (1, 200)]]
    refs = [_ort(model, f) for _, _, f in cases]
    errors = []

    def work(k):
        try:
            for r in range(6):
                i = (k + r) % len(cases)
                np.testing.assert_allclose(exe.run(**cases[i][2])[0], refs[i], rtol=2e-5, atol=2e-5)
        except AssertionError as e:
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_bounded_below_min_keys_keeps_the_three_kernels():
    """A sequence declared at most 128 long never reaches MIN_KEYS: the dynamic build keeps
    matmul, softmax, matmul, as a static build of any of its sizes would."""
    model = _model()
    mod, exe = _build(model, dims={"sequence": (1, 128)})
    assert not _fused(mod)
    feeds = _feeds(2, 77)
    np.testing.assert_allclose(exe.run(**feeds)[0], _ort(model, feeds), rtol=2e-5, atol=2e-5)
    mod, _ = _build(model, dims={"sequence": (1, 512)})
    assert _fused(mod)


def test_avx2_build():
    t = Target("llvm -mcpu=haswell")
    if not t.runs_here:
        pytest.skip("this machine cannot run haswell code")
    model = _model(mask="padding")
    mod = G.optimize(G.from_onnx(model), target=t)
    exe = G.build(mod, target=t)
    assert _fused(mod) and _schedules(exe) == {"attention_blocked"}
    # AVX2's key tile is 3 vectors of 8: 32 and 50 keys end in a shifted tile
    for B, S in [(1, 1), (2, 32), (3, 37), (1, 50), (1, 515)]:
        feeds = _feeds(B, S, "padding")
        np.testing.assert_allclose(exe.run(**feeds)[0], _ort(model, feeds), rtol=2e-5, atol=2e-5,
                                   err_msg=f"batch {B}, sequence {S}")


def _short_keys_seen(model, monkeypatch):
    """_build, compiling afresh, with the short_keys variant's lowered code as text."""
    monkeypatch.setenv("TDSL_CACHE", "0")
    clear_kernel_cache()
    seen, codegen = [], llvm.codegen

    def spy(func, target="llvm"):
        if func.name.endswith("short_keys"):
            seen.append(str(func))
        return codegen(func, target)
    monkeypatch.setattr(llvm, "codegen", spy)
    mod, exe = _build(model)
    assert len(seen) == 1
    return exe, seen[0]


@pytest.mark.parametrize("mask, rows", [("padding", None), ("causal", None), ("padding", "target")])
def test_short_keys_padded_to_one_tile(mask, rows, monkeypatch):
    """Below SHORT_KEYS keys the variant runs the blocked kernel over SHORT_KEYS keys and
    blocks of SHORT_ROWS rows, what lies past the call's padded: one copy of each
    micro-kernel, no guard in them; right on each side of the class boundary, at rows
    that are no multiple of the block, with a mask read per row (causal), and with more
    or fewer queries than keys (cross-attention), against onnxruntime."""
    model = _model(batch=1 if mask == "causal" else "batch", mask=mask, rows=rows)
    exe, text = _short_keys_seen(model, monkeypatch)
    assert _variants(exe) == {"sequence == 1": "attention_one",
                              f"sequence < {cpu_attention.SHORT_KEYS}": "attention_short_keys"}
    for stage in ("attn_dot", "attn_acc"):
        updates = [ln for ln in text.splitlines() if ln.lstrip().startswith(stage) and f"] = {stage}" in ln]
        assert len(updates) == 1 and "likely(" not in text, (stage, updates)
    sizes = [(1, 1), (1, 31), (1, 32), (1, 33), (1, 9)] if mask == "causal" else \
        [(1, 1), (2, 31), (1, 32), (3, 33), (2, 9)]
    for B, S in sizes:
        for R in ((None,) if rows is None else (1, 8, 40)):
            feeds = _feeds(B, S, mask, rows=R)
            np.testing.assert_allclose(exe.run(**feeds)[0], _ort(model, feeds), rtol=2e-5, atol=2e-5,
                                       err_msg=f"batch {B}, sequence {S}, rows {R}")
