"""bench/attention_classes.py: the dynamic attention's kernels with their build CPU, and
per size the class that ran against the static build's kernels (the two builds' outputs
checked equal by the script)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
pytest.importorskip("onnx")
import attention_classes  # noqa: E402


def test_each_class_at_its_sizes(capsys, monkeypatch):
    monkeypatch.setenv("TDSL_NUM_THREADS", os.environ.get("TDSL_NUM_THREADS", "1"))
    attention_classes.main(["--heads", "2", "--dim", "16", "--value", "16", "--sizes", "1x1,2x5",
                            "--number", "3", "--repeat", "1"])
    out = capsys.readouterr().out.splitlines()
    built = {ln.split()[0] for ln in out if ln.startswith("  fused_attention")}
    assert built == {"fused_attention", "fused_attention_one", "fused_attention_short_keys"}
    rows = {ln.split()[0]: ln.split() for ln in out if ln.strip().split(" ")[0] in ("1x1", "2x5")}
    assert rows["1x1"][1] == "fused_attention_one" and rows["2x5"][1] == "fused_attention_short_keys"
    for r in rows.values():
        # below the fusion threshold the static build keeps the three kernels
        assert r[3].split(",") == ["fused_matmul_multiply_add", "fused_softmax", "fused_matmul"]
        assert float(r[2]) > 0 and float(r[4]) > 0 and float(r[5]) > 0
