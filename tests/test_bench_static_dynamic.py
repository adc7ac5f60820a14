"""bench/static_dynamic.py: a row per size, its static and dynamic builds agreeing (the
script raises where they do not), with the kernels asked for under it."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
pytest.importorskip("onnxruntime")      # bench/dynamic imports bench/graph's session helper
import static_dynamic  # noqa: E402


@pytest.mark.parametrize("cpu", [[], ["--cpu"]])
def test_prints_a_row_per_size(capsys, monkeypatch, cpu):
    # --cpu runs on one thread: the tests after this one keep their count
    monkeypatch.setenv("TDSL_NUM_THREADS", os.environ.get("TDSL_NUM_THREADS", "2"))
    static_dynamic.main(["conv1d_net", "--sizes", "1,2", "--rounds", "2", "--number", "1",
                         "--repeat", "1", "--kernels", "1"] + cpu)
    lines = capsys.readouterr().out.splitlines()[1:]
    rows = [line.split() for line in lines if not line.startswith(" ")]
    assert [r[:2] for r in rows] == [["conv1d_net", "1x1x4000"], ["conv1d_net", "2x1x4000"]]
    for r in rows:
        dyn, st, ratio = (float(v) for v in r[2:5])
        assert dyn > 0 and st > 0 and ratio == pytest.approx(st / dyn, abs=0.015)
        assert len(r[5:]) == 2          # one ratio per round
    assert sum(line.startswith("    fused_") for line in lines) == 2
