"""Sweeps the GPU rules' knobs on a lent CUDA GPU, to choose the defaults from measurements
rather than guesses, and profiles the networks kernel by kernel.

    python bench/gpu_probe.py [sgemm] [conv] [bf16] [nets]      # all four by default
    python bench/gpu_probe.py --one sgemm|bf16|wgmma            # one launch, for ncu

Each sweep row builds one variant (auto_schedule params for the float32 contraction rule,
warps x warp tiles x k step x shared stages for the tensor-core schedule), checks its output against numpy
(rel err) and times it with device events. `nets` prints ResNet-18 and MobileNetV2 at
batch 8: their time beside torch's and the executor's per-kernel profile."""
from __future__ import annotations

import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl  # noqa: E402
from tdsl.examples import mma_gemm, wgmma_gemm  # noqa: E402

import gpu as suite  # noqa: E402  (bench/gpu.py: the rows' definitions and timing)


def sweep_sgemm(n=4096):
    A = np.random.rand(n, n).astype(np.float32)
    B = np.random.rand(n, n).astype(np.float32)
    ref = A.astype(np.float64) @ B
    variants = [dict()]
    for kt in (8, 16, 32):
        for dbl in (False, True):
            variants.append(dict(block=(16, 16), thread_tile=(8, 8), k_tile=kt, double_buffer=dbl))
    variants += [dict(block=(8, 16), thread_tile=(8, 8), k_tile=16, double_buffer=True),
                 dict(block=(16, 16), thread_tile=(8, 4), k_tile=16, double_buffer=True),
                 dict(block=(8, 32), thread_tile=(8, 4), k_tile=16, double_buffer=True)]
    for p in variants:
        _row(f"sgemm {n} {p or 'default'}", lambda p=p: suite._gemm_auto(n, p),
             [A, B, np.zeros((n, n), np.float32)], ref, 2.0 * n ** 3)


def sweep_conv():
    N, C, H, W, F = 8, 64, 56, 56, 64
    X = np.random.rand(N, C, H + 2, W + 2).astype(np.float32)
    Wt = np.random.rand(F, C, 3, 3).astype(np.float32)
    import torch
    ref = torch.nn.functional.conv2d(torch.from_numpy(X).double(), torch.from_numpy(Wt).double()).numpy()
    variants = [dict()]
    for blk, tt in (((16, 16), (4, 4)), ((8, 16), (8, 4)), ((16, 16), (8, 4)), ((8, 16), (4, 8)),
                    ((16, 16), (4, 8)), ((8, 8), (8, 8)), ((16, 16), (8, 8))):
        for kt in (8, 16):
            variants.append(dict(block=blk, thread_tile=tt, k_tile=kt, double_buffer=True))
    for p in variants:
        _row(f"conv {p or 'default'}", lambda p=p: suite._conv_auto(N, C, H, W, F, p),
             [X, Wt, np.zeros((N, F, H, W), np.float32)], ref, 2.0 * N * F * C * 9 * H * W)


def sweep_bf16(n=4096):
    a = np.random.rand(n, n).astype(np.float32)
    b = np.random.rand(n, n).astype(np.float32)
    A, B = tdsl.nd.float32_to_bfloat16(a), tdsl.nd.float32_to_bfloat16(b)
    ref = mma_gemm.reference(A, B).astype(np.float64)
    from tdsl.runtime import cuda as rcuda
    if tuple(rcuda.get_device(0).compute_capability) == (9, 0):
        # Hopper first: tdsl's wgmma schedule (warpgroups, 64-column blocks, stages)
        for wgs, nb, st in ((2, 2, 3), (2, 2, 4), (1, 2, 4), (2, 1, 4)):
            def build(wgs=wgs, nb=nb, st=st):
                return wgmma_gemm.schedule(n, n, n, "bfloat16", warpgroups=wgs, n_blocks=nb,
                                           stages=st)
            _row(f"bf16 {n} wgmma warpgroups {wgs} n blocks {nb} stages {st}", build,
                 [A, B, np.zeros((n, n), np.float32)], ref, 2.0 * n ** 3)
    # (warps, warp tiles, k step, stages): the shipped 2 x 2 of 64 x 64 at 2-5 stages, then
    # 8-warp blocks (128 x 256, 256 x 128) and k steps of 16 and 64 at 3-4
    variants = [((2, 2), (4, 8), 32, st) for st in (2, 3, 4, 5)]
    variants += [((2, 4), (4, 8), 32, 3), ((2, 4), (4, 8), 32, 4), ((4, 2), (4, 8), 32, 3),
                 ((2, 4), (4, 4), 32, 4), ((4, 2), (2, 8), 32, 4), ((2, 2), (4, 8), 16, 4),
                 ((2, 2), (4, 8), 64, 3), ((2, 4), (4, 8), 64, 2), ((2, 4), (4, 4), 64, 3)]
    for warps, tiles, k, st in variants:
        def build(warps=warps, tiles=tiles, k=k, st=st):
            return mma_gemm.schedule(n, n, n, "bfloat16", warps=warps, warp_tiles=tiles,
                                     k_step=k, stages=st)
        _row(f"bf16 {n} warps {warps} tiles {tiles} k {k} stages {st}", build,
             [A, B, np.zeros((n, n), np.float32)], ref, 2.0 * n ** 3)


def _row(name, make, host, ref, flops):
    try:
        s, args = make()
        f = tdsl.build(s, args, target="cuda", name="probe")
        res = f.resources("sm_90")
        regs = max(r.registers for r in res)
        smem = max(r.shared_bytes for r in res)
        spill = sum(r.spill_bytes for r in res)
        t, out = suite.time_on_device(f, host, 10, tdsl.cuda(0))
        print(f"{name:70s} {flops / t / 1e12:7.2f} TFLOP/s  err {suite._rel_err(out, ref):.1e}  "
              f"regs {regs} smem {smem} spill {spill}", flush=True)
    except Exception as e:
        print(f"{name:70s} FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        traceback.print_exc()


def nets():
    torch = suite.torch_fp32()
    for name in ("resnet18", "mobilenetv2"):
        try:
            model, tm, shape = suite.network(name, 8)
            exe = suite.build_network(model, shape)
            x = np.random.rand(*shape).astype(np.float32)
            exe.set_input(exe.input_names[0], x)
            t = exe.benchmark(number=10, repeat=3)["min"]
            tm = tm.cuda()
            with torch.no_grad():
                xt = torch.from_numpy(x).cuda()
                tt = suite.block_time(lambda: tm(xt), torch.cuda.synchronize, 10)
                ref = tm(xt).double().cpu().numpy()
            print(f"{name} b8: tdsl {t * 1e3:.3f} ms, torch {tt * 1e3:.3f} ms, "
                  f"rel err {suite._rel_err(exe.run(x)[0], ref):.1e}", flush=True)
            print(exe.profile_text(number=5, top=30), flush=True)
        except Exception:
            traceback.print_exc()


def one(which):
    """A single launch of one kernel (for ncu -c 1)."""
    n = 4096
    if which == "bf16":
        s, args = mma_gemm.schedule(n, n, n, "bfloat16", warps=(2, 2), warp_tiles=(4, 8),
                                    k_step=32, stages=4)
    elif which == "wgmma":
        s, args = wgmma_gemm.schedule(n, n, n, "bfloat16", stages=4)
    else:
        s, args = suite._gemm_auto(n)
    f = tdsl.build(s, args, target="cuda", name="probe")
    dev = tdsl.cuda(0)
    arrays = [tdsl.nd.array(suite._random(tuple(int(d) for d in a.shape), a.dtype), dev) for a in args]
    f(*arrays)
    dev.sync()


# Candidate defaults of the GPU contraction rule and the graph's column-GEMM conv, as
# module constants to override: name -> {constant: value}.
POLICIES = {
    "default": {},
    "thread_tile_8x8_block_8x16": {"THREAD_TILE": (8, 8), "BLOCK": (8, 16)},
    "long_k_4096": {"LONG_K": 4096},
    "whole_warps": {"SPREAD": False},
}


def policy(name, lock_path):
    """Applies policy `name`, builds its kernels and ResNet-18 at batch 8 and 1, then times
    them holding `lock_path` (so parallel builds never share the GPU while timing)."""
    import fcntl

    torch = suite.torch_fp32()
    from tdsl.autosched import gpu_contraction as gc
    from tdsl.graph.strategy.gpu import conv_gemm
    for k, v in POLICIES[name].items():
        setattr(conv_gemm if k == "MAX_PIXELS" else gc, k, v)
    n1, n4 = 1024, 4096
    built = []
    for label, make, shapes, flops in (
            ("sgemm 4096", lambda: suite._gemm_auto(n4), None, 2.0 * n4 ** 3),
            ("sgemm 1024", lambda: suite._gemm_auto(n1), None, 2.0 * n1 ** 3),
            ("conv row", lambda: suite._conv_auto(8, 64, 56, 56, 64), None, 2.0 * 8 * 64 * 64 * 9 * 56 * 56)):
        s, args = make()
        built.append((label, tdsl.build(s, args, target="cuda", name="p"), args, flops))
    nets = []
    for net, b in (("resnet18", 8), ("resnet18", 1), ("mobilenetv2", 8)):
        model, tm, shape = suite.network(net, b)
        nets.append((f"{net} b{b}", suite.build_network(model, shape), tm, shape))
    with open(lock_path, "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        dev = tdsl.cuda(0)
        line = [f"{name:24s}"]
        for label, f, args, flops in built:
            t, _ = suite.time_on_device(f, [suite._random(tuple(int(d) for d in a.shape), a.dtype)
                                            for a in args], 10, dev)
            line.append(f"{label} {flops / t / 1e12:6.2f}")
        for b, exe, tm, shape in nets:
            x = np.random.rand(*shape).astype(np.float32)
            exe.set_input(exe.input_names[0], x)
            t = exe.benchmark(number=10, repeat=3)["min"]
            with torch.no_grad():
                tm = tm.cuda()
                ref = tm(torch.from_numpy(x).cuda()).double().cpu().numpy()
            line.append(f"{b} {t * 1e3:6.3f} ms err {suite._rel_err(exe.run(x)[0], ref):.0e}")
        print(" | ".join(line), flush=True)
        if name != "old":
            print(nets[0][1].profile_text(number=5, top=12), flush=True)


def policies(names):
    """Every policy in its own process: builds in parallel, timings one at a time."""
    import subprocess
    import tempfile
    lock = os.path.join(tempfile.mkdtemp(), "gpu.lock")
    procs = [subprocess.Popen([sys.executable, __file__, "--policy", n, lock]) for n in names]
    for p in procs:
        p.wait()


def main(argv):
    if argv[:1] == ["--one"]:
        return one(argv[1])
    if argv[:1] == ["--policy"]:
        return policy(argv[1], argv[2])
    if argv[:1] == ["policies"]:
        return policies(argv[1:] or list(POLICIES))
    for part in argv or ["sgemm", "conv", "bf16", "nets"]:
        {"sgemm": sweep_sgemm, "conv": sweep_conv, "bf16": sweep_bf16, "nets": nets}[part]()


if __name__ == "__main__":
    main(sys.argv[1:])
