"""bench/builds_ab.py: kernel families named without their size-class suffixes, and a
row per side and per family for a small network of token ids, built cold on each side."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import builds_ab  # noqa: E402

onnx = pytest.importorskip("onnx")
from token_models import tokens_model  # noqa: E402


def test_families():
    assert builds_ab.family("fused_dense_add_small#3") == "fused_dense_add"
    assert builds_ab.family("fused_dense_add_1#7") == "fused_dense_add"
    assert builds_ab.family("fused_attention_one#2") == "attention and heads"
    assert builds_ab.family("fused_reshape_transpose_multiply_1_one#9") == "attention and heads"
    assert builds_ab.family("fused_layer_norm#0") == "fused_layer_norm"


def test_prints_both_sides_and_each_family(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TDSL_NUM_THREADS", os.environ.get("TDSL_NUM_THREADS", "1"))
    onnx.save(tokens_model(), str(tmp_path / "tokens.onnx"))
    builds_ab.main(["tokens", "--size", "2x3", "--builds", "1", "--number", "2", "--repeat", "1",
                    "--traces", "1", "--models-dir", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tokens 2x3")
    assert out[1].split()[:2] == ["static", "run"] and out[2].split()[:2] == ["dynamic", "run"]
    assert "dynamic/static: run" in out[3]
    fams = {line.split()[0]: line.split() for line in out[4:]}
    assert any("dense" in f for f in fams) and "fused_layer_norm" in fams
    assert all(float(r[-4]) > 0 and float(r[-2]) > 0 for r in fams.values())
