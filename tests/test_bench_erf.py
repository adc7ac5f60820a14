"""bench/erf.py: the exact GELU it times is right on every side it compares."""
import math
import os
import sys

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
erf_bench = pytest.importorskip("erf")


def test_gelu_sides_agree_with_float64():
    n = 4096
    x = (np.random.default_rng(1).standard_normal(n) * 3).astype(np.float32)
    x[:4] = [0.0, -0.0, 1e-30, -50.0]
    want = 0.5 * x.astype(np.float64) * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    got = np.empty_like(x)
    erf_bench.tdsl_gelu(n)(x, got)
    ref = erf_bench.ort_gelu(n, 1).run(None, {"x": x})[0]
    # 1 + erf(x) cancels for negative x: half an ulp of 1, times |x|, is the floor
    # either side can reach
    atol = 0.5 * np.abs(x).max() * 2.0 ** -23
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=atol)
    np.testing.assert_allclose(ref, want, rtol=2e-6, atol=atol)


def test_prints_a_row(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    # the bench sets the process's thread counts: the tests after this one keep theirs
    monkeypatch.setenv("TDSL_NUM_THREADS", os.environ.get("TDSL_NUM_THREADS", ""))
    if not os.environ["TDSL_NUM_THREADS"]:
        monkeypatch.delenv("TDSL_NUM_THREADS")
    torch_threads = torch.get_num_threads()
    try:
        erf_bench.main(["--sizes", "2048", "--repeat", "1"])
    finally:
        torch.set_num_threads(torch_threads)
    row = capsys.readouterr().out.splitlines()[-1].split()
    assert row[0] == "2048" and float(row[-1]) < 1e-5
