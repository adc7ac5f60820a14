"""bench/build_phases.py: a cold build's CPU charged to each kernel and phase, the
size-class variants told apart, and nothing left patched afterwards."""
import importlib
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import build_phases  # noqa: E402

onnx = pytest.importorskip("onnx")
from token_models import tokens_model  # noqa: E402


def _patched_points():
    from tdsl.codegen import llvm
    from tdsl.codegen.llvm import jit
    from tdsl.graph.strategy import dispatch
    from tdsl.runtime import cpu
    lower = importlib.import_module("tdsl.lower")
    return [lower.check_reads, lower.schedule_to_func, llvm.codegen, jit._codegen, cpu.load_object,
            dispatch._compile_group] + [p.fn for p in lower.PASSES]


def test_every_kernel_is_charged_by_phase_and_nothing_stays_patched():
    before = _patched_points()
    model = tokens_model()
    cpu_s, ph = build_phases.profile_build(model, None)
    assert [a is b for a, b in zip(_patched_points(), before)] == [True] * len(before)
    kernels = ph.per_kernel()
    # the dense layer's size class for a few rows is a variant of its kernel
    assert kernels and ph.variants and set(ph.variants) <= set(kernels)
    assert abs(sum(ph.families().values()) - sum(ph.totals().values())) < 1e-9
    for name, row in kernels.items():
        assert set(row) == set(build_phases.PHASES) and all(v >= 0 for v in row.values())
        # a kernel compiled, not found in a cache, went through every step
        if row["llvm"] > 0:
            assert row["ir"] > 0 and row["loops"] > 0 and row["passes"] > 0 and row["load"] > 0
    assert sum(row["llvm"] > 0 for row in kernels.values()) >= 2      # the gather, the dense, ...
    # the phases are thread CPU inside the build, which the process's CPU covers
    assert 0 < sum(ph.totals().values()) <= cpu_s * 1.05


def test_static_build_has_no_variants_and_prints_both_sides(capsys, tmp_path):
    model = tokens_model()
    _, ph = build_phases.profile_build(model, {"batch": 2, "sequence": 3})
    assert ph.kernels and not ph.variants
    onnx.save(model, str(tmp_path / "tokens.onnx"))
    build_phases.main(["tokens", "--models", str(tmp_path), "--sizes", "1x1,2x3"])
    out = capsys.readouterr().out
    assert "tokens: dynamic build, kernel by kernel" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.startswith("  ") and line.split()[0] in build_phases.PHASES + ("cpu",)}
    assert set(rows) == set(build_phases.PHASES) | {"cpu"}
    dyn, static = float(rows["cpu"][1]), float(rows["cpu"][2])
    assert dyn > 0 and static > 0 and abs(float(rows["cpu"][4]) - dyn / static) < 0.01
    assert "size-class variants:" in out
    fams = out.split("kernel families")[1].splitlines()[2:]
    # the dense layer and its "small" variant are one family; static builds have it too
    dense = [line.split() for line in fams if line.split() and line.split()[0] == "fused_dense_add"]
    assert len(dense) == 1 and float(dense[0][1]) > 0 and float(dense[0][2]) > 0


def test_summary_rows():
    d = {p: 2.0 for p in build_phases.PHASES + ("outside kernels", "cpu")}
    s = {p: 1.0 for p in build_phases.PHASES + ("outside kernels", "cpu")}
    rows = build_phases.summary(d, s)
    assert [r[0] for r in rows] == list(build_phases.PHASES) + ["outside kernels", "cpu"]
    assert all(r[3] == 1.0 and r[4] == 2.0 for r in rows)
