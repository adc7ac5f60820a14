"""No temporary file outlives the call that needed it: a few hundred distinct builds per
target (and export/load cycles) in a fresh process with a private temp dir leave no
`tdsl*` entry there."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import json, os, sys, tempfile
import numpy as np
import tdsl
from tdsl.runtime import ccompiler

N = int(sys.argv[1])
tmp = tempfile.gettempdir()
def leftovers():
    return sorted(e for e in os.listdir(tmp) if e.startswith("tdsl"))
before = leftovers()
a = np.arange(64, dtype="float32")

def cpu_kernel(c):
    A = tdsl.placeholder((64,), name="A")
    B = tdsl.compute((64,), lambda i: A[i] * float(c) + 1.0, name="B")
    s = tdsl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=16)
    s[B].parallel(io)
    return s, [A, B]

def gpu_kernel(c):
    A = tdsl.placeholder((64,), name="A")
    B = tdsl.compute((64,), lambda i: A[i] * float(c), name="B")
    s = tdsl.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, tdsl.thread_axis("blockIdx.x"))
    s[B].bind(tx, tdsl.thread_axis("threadIdx.x"))
    return s, [A, B]

counts = {}
def check(f, c, scale_only=False):
    b = np.zeros_like(a)
    f(a, b)
    assert np.allclose(b, a * c if scale_only else a * c + 1.0), c

for c in range(N):                                   # JIT, then the C compiler
    check(tdsl.build(*cpu_kernel(c)), c)
counts["llvm"] = N
if ccompiler.find():
    for c in range(N):
        check(tdsl.build(*cpu_kernel(c), target="c"), c)
    for c in range(N):                               # GPU schedules emulated on the CPU
        check(tdsl.build(*gpu_kernel(c), target="c"), c, scale_only=True)
    for c in range(N // 4):                          # export + load cycles
        p = os.path.join(sys.argv[2], f"k{c}.so")
        tdsl.build(*cpu_kernel(1000 + c)).export_library(p)
        check(tdsl.load_module(p), 1000 + c)
    counts.update(c=N, emu=N, export=N // 4)
for c in range(N):                                   # CUDA source (and PTX where NVRTC is)
    tdsl.build(*gpu_kernel(c), target="cuda")
counts["cuda"] = N
if tdsl.opencl(0).exist:
    for c in range(5):
        check(tdsl.build(*gpu_kernel(c), target="opencl"), c, scale_only=True)
    counts["opencl"] = 5
import gc; gc.collect()
print(json.dumps({"before": before, "after": leftovers(), "counts": counts}))
"""


def test_builds_leave_no_temporary_files(tmp_path):
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    (tmp_path / "libs").mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(private_tmp),
               TDSL_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", SCRIPT, "200", str(tmp_path / "libs")], env=env,
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["before"] == [] and out["after"] == [], out
    assert out["counts"]["llvm"] == out["counts"]["cuda"] == 200
    # nothing at all was left in the private temp dir, whatever its name
    assert [e for e in os.listdir(private_tmp) if not e.startswith("pocl")] == []
