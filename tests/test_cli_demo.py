"""`python -m tdsl demo --target cuda|opencl` in a subprocess: the GPU schedule is built and
described with no device (CUDA here: compile only), and run and checked where one exists."""
import os
import subprocess
import sys

import pytest

import tdsl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _demo(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tdsl", "demo", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300)


def test_cuda_demo_builds_and_reports_resources():
    from tdsl.runtime import cuda
    if not cuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    r = _demo("--target", "cuda", "--size", "256")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "a 256x256x256 float32 matmul on cuda" in out
    assert "loop IR (" in out and 'thread_binding(16, thread="threadIdx.x")' in out
    assert "cuda source: " in out and "matmul_kernel grid 2x2x1 block 16x16x1" in out
    assert "ptxas resources" in out and "sm_80" in out and "sm_90" in out, out
    if tdsl.cuda(0).exist:
        assert "correct: True" in out and "tdsl" in out
    else:
        assert "no cuda device here: compile only" in out


def test_opencl_demo_runs_beside_numpy():
    if not tdsl.opencl(0).exist:
        pytest.skip("no OpenCL device")
    r = _demo("--target", "opencl", "--size", "128")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "opencl source: " in out and "matmul_kernel grid 1x1x1 block 16x16x1" in out
    assert "ptxas" not in out
    assert "correct: True" in out and "ratio tdsl/numpy" in out, out
