"""bench/builds_ab.py: kernel families named without their size-class suffixes, and a
row per side and per family for a small network of token ids, built cold on each side."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import builds_ab  # noqa: E402

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def test_families():
    assert builds_ab.family("fused_dense_add_small#3") == "fused_dense_add"
    assert builds_ab.family("fused_dense_add_1#7") == "fused_dense_add"
    assert builds_ab.family("fused_attention_one#2") == "attention and heads"
    assert builds_ab.family("fused_reshape_transpose_multiply_1_one#9") == "attention and heads"
    assert builds_ab.family("fused_layer_norm#0") == "fused_layer_norm"


def _tokens_model():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("word", rng.standard_normal((1000, 16))), ("w", rng.standard_normal((16, 16))),
        ("b", rng.standard_normal(16)), ("g", np.ones(16)), ("beta", np.zeros(16)))]
    nodes = [helper.make_node("Gather", ["word", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("LayerNormalization", ["hb", "g", "beta"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "tokens",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_prints_both_sides_and_each_family(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TDSL_NUM_THREADS", os.environ.get("TDSL_NUM_THREADS", "1"))
    onnx.save(_tokens_model(), str(tmp_path / "tokens.onnx"))
    builds_ab.main(["tokens", "--size", "2x3", "--builds", "1", "--number", "2", "--repeat", "1",
                    "--traces", "1", "--models-dir", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tokens 2x3")
    assert out[1].split()[:2] == ["static", "run"] and out[2].split()[:2] == ["dynamic", "run"]
    assert "dynamic/static: run" in out[3]
    fams = {line.split()[0]: line.split() for line in out[4:]}
    assert any("dense" in f for f in fams) and "fused_layer_norm" in fams
    assert all(float(r[-4]) > 0 and float(r[-2]) > 0 for r in fams.values())
