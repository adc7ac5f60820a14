"""bench/isa_cap.py: which ISA the references are held to, and reading it back from
OpenVINO's compiled model."""
import os
import subprocess
import sys
import textwrap
import types
from datetime import timedelta

import pytest

import tdsl

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")
sys.path.insert(0, BENCH)
isa_cap = pytest.importorskip("isa_cap")


def test_the_cap_is_the_builds_isa_only_when_it_is_narrower_than_the_hosts():
    avx512 = tdsl.target.Target("llvm -mcpu=skylake-avx512")
    avx2 = tdsl.target.Target("llvm -mcpu=haswell")
    assert isa_cap.cap_for(avx2, avx512) == "AVX2"
    assert isa_cap.cap_for(avx512, avx512) == ""
    assert isa_cap.cap_for(avx2, avx2) == ""


@pytest.mark.parametrize("name, isa", [("brgconv_avx512_1x1_f32", "avx512"), ("brgconv_avx2_dw_f32", "avx2"),
                                       ("jit_avx512_f32", "avx512"), ("jit_avx2_f32", "avx2"),
                                       ("brgconv_avx512_amx_bf16", "amx"), ("gemm_mlas_f32", "mlas"),
                                       ("jit_uni_f32", ""), ("unknown_f32", ""), ("ref_any_f32", "")])
def test_a_kernel_name_says_its_isa(name, isa):
    assert isa_cap.isa_of(name) == isa


def test_the_note_names_the_layers_that_ran_wider_than_the_cap():
    from collections import Counter
    assert isa_cap.ov_note(Counter(avx2=20, **{"": 5}), "AVX2") == ""
    assert isa_cap.ov_note(Counter(avx512=20), "") == ""        # no cap: nothing to say
    note = isa_cap.ov_note(Counter(avx2=20, mlas=2, avx512=1), "AVX2")
    assert "20 layers at avx2" in note and "1 layers at avx512" in note and "2 FullyConnected" in note


def test_the_wide_share_is_of_the_layers_time():
    def layer(kind, ms):
        return types.SimpleNamespace(exec_type=kind, real_time=timedelta(milliseconds=ms))
    prof = [layer("brgconv_avx2_f32", 3), layer("gemm_mlas_f32", 1), layer("unknown_f32", 0)]
    assert isa_cap.ov_wide_share(prof) == pytest.approx(0.25)
    assert isa_cap.ov_wide_share([]) == 0.0


def test_a_cap_set_after_openvino_loaded_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", types.ModuleType("openvino"))
    with pytest.raises(RuntimeError, match="already imported"):
        isa_cap.apply("AVX2")


_PROBE = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {bench!r})
    import isa_cap
    if {cap!r}:
        isa_cap.apply({cap!r})
    import openvino as ov
    from tdsl.graph import models
    core = ov.Core()
    m = core.compile_model(core.read_model(models.mobilenetv2_blocks(1, 32).SerializeToString()), "CPU",
                           {{"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}})
    n = isa_cap.ov_layer_isas(m)
    print(n["avx512"] + n["amx"], n["avx2"])
""")


def _probe(cap):
    env = dict(os.environ)
    for k in isa_cap.ENV:
        env.pop(k, None)
    root = os.path.join(os.path.dirname(__file__), "..")
    env["PYTHONPATH"] = os.path.abspath(root) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _PROBE.format(bench=os.path.abspath(BENCH), cap=cap)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    wide, avx2 = map(int, out.stdout.split()[-2:])
    return wide, avx2


@pytest.mark.skipif(tdsl.target.Target.host().vector_bits < 512, reason="the host has no ISA above AVX2 to cap")
def test_openvino_runs_its_convolutions_at_avx2_when_capped():
    pytest.importorskip("openvino")
    wide, avx2 = _probe("")
    assert wide > 0                                       # this host: AVX-512 kernels uncapped
    wide, avx2 = _probe("AVX2")
    assert wide == 0 and avx2 > 0
