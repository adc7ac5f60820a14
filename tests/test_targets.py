"""The target description and the schedules sized from it, on several CPUs from any x86-64
host: each kernel is built for haswell, znver3, skylake-avx512, znver5 and an AArch64 CPU;
the assembly's vector width must be the target's; kernels the host can run are run and
checked against numpy (an AVX-512 host runs all four x86 targets, an AVX2 host two)."""
import numpy as np
import pytest

import tdsl
from tdsl import tiling
from tdsl.errors import BuildError
from tdsl.examples import gemm, kernels, peak
from tdsl.target import Target, vector_bits_in_asm

X86 = ["llvm -mcpu=haswell", "llvm -mcpu=znver3", "llvm -mcpu=skylake-avx512", "llvm -mcpu=znver5"]
ARM = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
ALL = X86 + [ARM]
EXPECTED = {  # vector bits, vector registers
    "llvm -mcpu=haswell": (256, 16), "llvm -mcpu=znver3": (256, 16),
    "llvm -mcpu=skylake-avx512": (512, 32), "llvm -mcpu=znver5": (512, 32), ARM: (128, 32),
}


@pytest.mark.parametrize("spec", ALL)
def test_description_of_known_cpus(spec):
    t = Target(spec)
    bits, regs = EXPECTED[spec]
    assert (t.vector_bits, t.vector_registers) == (bits, regs)
    assert t.vector_lanes("float32") == bits // 32 and t.vector_lanes("float64") == bits // 64
    assert t.vector_lanes("int8") == bits // 8
    assert t.fma and t.fma_units >= 1 and t.fma_chains >= 4
    assert t.cache_bytes(1) < t.cache_bytes(2) <= t.cache_bytes(3)
    assert t.num_cores >= 1
    assert str(t) == spec and Target(str(t)) == t and hash(Target(spec)) == hash(t)
    assert ("compile only" in t.describe()) == (not t.runs_here)
    assert t.runs_here or spec == ARM or t.vector_bits > Target.host().vector_bits
    assert "<table>" in t._repr_html_() and t.cpu in t._repr_html_()


def test_host_target_and_options():
    host = Target.host()
    assert host == Target("llvm") == Target(None) and host.runs_here and host.native
    assert host.vector_bits in (128, 256, 512)
    assert Target("llvm -num-cores=3").num_cores == 3
    assert Target(host) == host
    assert Target("cuda").vector_lanes("float32") == 1 and Target("cuda").warp_size == 32
    assert Target("c").vector_bits == host.vector_bits
    other = "znver3" if host.cpu != "znver3" else "haswell"
    assert host.fingerprint != Target(f"llvm -mcpu={other}").fingerprint
    assert not Target(ARM).runs_here


@pytest.mark.parametrize("bad, match", [
    ("llvm -mcpu=notacpu", "unknown CPU 'notacpu'"),
    ("llvm -mtriple=nonsense-x-y", "triple"),
    ("llvm -O3", "unknown target option '-O3'"),
    ("llvm -mattr=avx2", "need a \\+ or - sign"),
    ("llvm -num-cores=0", "-num-cores"),
    ("cuda -mcpu=sm_90", "takes no options"),
    ("tpu", "unknown target 'tpu'"),
    ("", "must be a string"),
])
def test_bad_targets_are_named(bad, match):
    with pytest.raises(BuildError, match=match):
        Target(bad)
    if bad:
        s, args = kernels.bias_relu_schedule(4, 16)
        with pytest.raises(BuildError):
            tdsl.build(s, args, target=bad)


def test_cache_level_checked():
    with pytest.raises(BuildError, match="level"):
        Target.host().cache_bytes(4)


@pytest.mark.parametrize("spec", ALL)
def test_register_tiles_fit_the_register_file(spec):
    t = Target(spec)
    for rows, cols in [(1024, 1024), (1000, 1000), (7, 512), (56, 64), (3, 10), (1, 1000)]:
        r, v = tiling.register_tile(t, rows, cols)
        assert 1 <= r <= rows and v >= 1
        assert r * v + v + 1 <= t.vector_registers and r * v <= 3 * t.vector_registers // 4
        rw, vw = tiling.register_tile(t, rows, cols, whole_rows=True)
        assert rows % rw == 0
    mr, nr = tiling.gemm_tile(t, 1024, 1024)
    assert nr % t.vector_lanes() == 0
    assert mr * nr // t.vector_lanes() >= min(t.fma_chains, 8)


@pytest.mark.parametrize("spec", ALL)
def test_row_vector_splits_short_rows_evenly_and_long_rows_by_full_vectors(spec):
    t = Target(spec)
    lanes = t.vector_lanes()
    assert tiling.row_vector(t, lanes // 2) == lanes // 2
    # a row of a vector and a half: two equal vectors of three quarters, no tail
    assert tiling.row_vector(t, lanes + lanes // 2) == 3 * lanes // 4
    # a long row keeps whole vectors and leaves a tail (1500 is no multiple of 8 or 16)
    assert tiling.row_vector(t, 1500) == lanes
    assert tiling.row_vector(t, tiling.LONG_ROW * lanes + lanes // 2) == lanes


def _build(make, spec, *shape):
    s, args = make(*shape, target=spec)
    return tdsl.build(s, args, target=spec)


@pytest.mark.parametrize("spec", ALL)
def test_gemm_for_each_target(spec):
    t = Target(spec)
    M, N, K = 37, 70, 29          # ragged for every tile
    f = _build(gemm.register_blocked, spec, M, N, K)
    asm = f.get_source("asm")
    assert vector_bits_in_asm(asm) == t.vector_bits
    if t.arch == "x86_64":
        assert "vfmadd" in asm and ("zmm" in asm) == (t.vector_bits == 512)
    else:
        assert "fmla" in asm
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    if not t.runs_here:
        with pytest.raises(BuildError, match="cannot run"):
            f(a, b, c)
        return
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", ALL)
def test_conv2d_bias_relu_softmax_for_each_target(spec):
    t = Target(spec)
    C, H, W, CO = 8, 10, 14, 2 * t.vector_lanes()
    rng = np.random.default_rng(1)
    conv = _build(kernels.conv2d_schedule, spec, C, H, W, CO)
    relu = _build(kernels.bias_relu_schedule, spec, 9, 3 * t.vector_lanes() + 5)
    soft = _build(kernels.softmax_schedule, spec, 5, 100)
    for f in (conv, relu, soft):
        assert vector_bits_in_asm(f.get_source("asm")) == t.vector_bits
    if not t.runs_here:
        return
    bn = kernels.conv_block(t)
    d = rng.standard_normal((C, H, W), dtype=np.float32)
    w = rng.standard_normal((CO, C, 3, 3), dtype=np.float32)
    o = np.zeros((CO // bn, H, W, bn), np.float32)
    conv(d, kernels.pack_weight(w, bn), o)
    np.testing.assert_allclose(kernels.unpack_output(o), kernels.conv2d_reference(d, w), rtol=1e-4, atol=1e-3)
    x = rng.standard_normal((9, 3 * t.vector_lanes() + 5), dtype=np.float32)
    bias = rng.standard_normal(x.shape[1], dtype=np.float32)
    y = np.empty_like(x)
    relu(x, bias, y)
    np.testing.assert_array_equal(y, kernels.bias_relu_reference(x, bias))
    x = rng.standard_normal((5, 100), dtype=np.float32)
    y = np.empty_like(x)
    soft(x, y)
    np.testing.assert_allclose(y, kernels.softmax_reference(x), rtol=1e-5, atol=1e-7)


def test_cross_module_exports_an_object_file(tmp_path):
    f = _build(gemm.register_blocked, ARM, 16, 16, 16)
    path = f.export_library(str(tmp_path / "gemm_arm.o"))
    head = open(path, "rb").read(20)
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183   # EM_AARCH64
    with pytest.raises(BuildError, match=r"\.o"):
        f.export_library(str(tmp_path / "gemm_arm.so"))


@pytest.mark.parametrize("spec", ["llvm"] + [s for s in X86 if Target(s).runs_here][:1])
def test_fma_peak_probe_computes_its_chains(spec):
    steps = 50
    s, args, flops = peak.schedule(spec, steps=steps)
    f = tdsl.build(s, args, target=spec)
    assert "vfmadd" in f.get_source("asm")
    rng = np.random.default_rng(2)
    x = rng.random([d.value for d in args[0].shape]).astype("float32")
    b = rng.random(steps).astype("float32")
    p = np.empty_like(x)
    f(x, b, p)
    ref = x.astype(np.float64)
    for k in range(steps):
        ref = ref * np.float32(0.999) + b[k]
    np.testing.assert_allclose(p, ref, rtol=1e-5)
    assert flops == 2.0 * x.size * steps
    gflops, chains = peak.measure(spec, repeat=1)
    assert gflops > 0 and chains == x.shape[1]


def test_host_cpu_override_from_the_environment():
    import os
    import subprocess
    import sys
    code = "import tdsl; t = tdsl.target.Target.host(); print(t.cpu, t.vector_bits, t.vector_registers)"
    env = dict(os.environ, TDSL_HOST_CPU="haswell")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["haswell", "256", "16"], out.stderr
    env["TDSL_HOST_CPU"] = "notacpu"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "unknown CPU 'notacpu'" in out.stderr
