"""bench/dense_rows.py: prints one row per (K, N, rows), its two builds agreeing."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import dense_rows  # noqa: E402


def test_prints_a_row_per_size(capsys, monkeypatch):
    # the bench runs on one thread: the tests after this one keep their count
    monkeypatch.setenv("TDSL_NUM_THREADS", os.environ.get("TDSL_NUM_THREADS", "1"))
    dense_rows.main(["--kn", "32x24", "--rows", "1,9", "--repeat", "1", "--number", "2"])
    rows = [r.split() for r in capsys.readouterr().out.splitlines()[1:]]
    assert [r[:3] for r in rows] == [["32", "24", "1"], ["32", "24", "9"]]
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in rows)
    assert rows[0][6].endswith("_small") and not rows[1][6].endswith("_small")
