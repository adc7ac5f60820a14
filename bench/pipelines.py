"""Multi-stage image pipelines, as Halide's apps define them: tdsl.auto_schedule beside
Halide's CPU autoschedulers, in the same run: `python bench/pipelines.py` (`--quick`: 2048^2
instead of 4096^2; `--mcpu haswell` builds tdsl, and Halide, for AVX2; `--explain` prints
tdsl's decisions).

Pipelines (float32, single channel; the output is smaller than the input by the halo, so
neither side clamps at the borders):
- harris: Sobel x and y, the products Ixx Iyy Ixy, 3x3 box sums, det - 0.04 trace^2
  (apps/harris without the gray conversion);
- unsharp: a 5-tap Gaussian in x then in y, sharpen = 2 in - blur, ratio = sharpen / in,
  out = ratio * in (apps/unsharp on one channel);
- blur: a 3x3 box blur as two separable passes (apps/blur on float32).

Pipelines written with update definitions (tdsl.examples.update_pipelines: histeq,
iir_blur, bilateral_grid, max_filter) run first, each as tdsl's auto_schedule and hand
schedule beside Halide's app schedule (bench/pipelines_updates.py) and autoschedulers;
the summary gives tdsl auto / the best Halide autoscheduler and tdsl hand / Halide app.

Each row is one implementation: tdsl's auto schedule (no search), then Halide's
Mullapudi2016, Adams2019 and Li2018 autoschedulers (those whose plugin loads), each given
the target's core count (HL_NUM_THREADS, and `parallelism` in its parameters). Each is timed
in blocks (a warm-up, N calls, a pause), blocks interleaved between implementations, best
block kept: the machine may be shared. GB/s counts the input read and the output written
once. tdsl is checked against numpy and every Halide output against tdsl's.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import add_target_option, print_target, target_from  # noqa: E402

import tdsl  # noqa: E402
from tdsl.examples.pipelines import GAUSS5, HALO, K_HARRIS, PIPELINES as EXAMPLES  # noqa: E402
from tdsl.examples import update_pipelines as UP  # noqa: E402
from pipelines_updates import HALIDE as HALIDE_UPDATES  # noqa: E402

warnings.filterwarnings("ignore", message=".*will be interpreted as a float32 by Halide")


# --------------------------------------------------------------------------- definitions
# tdsl's definitions and numpy's references are tdsl.examples.pipelines'; Halide's here, the
# same arithmetic in the same order. Halide funcs are f(x, y): the same memory as [y, x].

def harris_halide(hl, inp):
    x, y = hl.Var("x"), hl.Var("y")
    Ix, Iy = hl.Func("Ix"), hl.Func("Iy")
    Ix[x, y] = (inp[x + 2, y] - inp[x, y] + 2.0 * (inp[x + 2, y + 1] - inp[x, y + 1])
                + inp[x + 2, y + 2] - inp[x, y + 2]) * (1.0 / 12)
    Iy[x, y] = (inp[x, y + 2] - inp[x, y] + 2.0 * (inp[x + 1, y + 2] - inp[x + 1, y])
                + inp[x + 2, y + 2] - inp[x + 2, y]) * (1.0 / 12)
    Ixx, Iyy, Ixy = hl.Func("Ixx"), hl.Func("Iyy"), hl.Func("Ixy")
    Ixx[x, y] = Ix[x, y] * Ix[x, y]
    Iyy[x, y] = Iy[x, y] * Iy[x, y]
    Ixy[x, y] = Ix[x, y] * Iy[x, y]

    def box(T, name):
        f = hl.Func(name)
        f[x, y] = (T[x, y] + T[x + 1, y] + T[x + 2, y] + T[x, y + 1] + T[x + 1, y + 1]
                   + T[x + 2, y + 1] + T[x, y + 2] + T[x + 1, y + 2] + T[x + 2, y + 2])
        return f
    Sxx, Syy, Sxy = box(Ixx, "Sxx"), box(Iyy, "Syy"), box(Ixy, "Sxy")
    out = hl.Func("harris")
    out[x, y] = (Sxx[x, y] * Syy[x, y] - Sxy[x, y] * Sxy[x, y]
                 - K_HARRIS * (Sxx[x, y] + Syy[x, y]) * (Sxx[x, y] + Syy[x, y]))
    return out


def unsharp_halide(hl, inp):
    g = GAUSS5
    x, y = hl.Var("x"), hl.Var("y")
    blur_x, blur_y, sharpen, ratio, out = (hl.Func(n) for n in
                                          ("blur_x", "blur_y", "sharpen", "ratio", "unsharp"))
    blur_x[x, y] = (g[0] * (inp[x, y] + inp[x + 4, y]) + g[1] * (inp[x + 1, y] + inp[x + 3, y])
                    + g[2] * inp[x + 2, y])
    blur_y[x, y] = (g[0] * (blur_x[x, y] + blur_x[x, y + 4]) + g[1] * (blur_x[x, y + 1]
                    + blur_x[x, y + 3]) + g[2] * blur_x[x, y + 2])
    sharpen[x, y] = 2.0 * inp[x + 2, y + 2] - blur_y[x, y]
    ratio[x, y] = sharpen[x, y] / inp[x + 2, y + 2]
    out[x, y] = ratio[x, y] * inp[x + 2, y + 2]
    return out


def blur_halide(hl, inp):
    x, y = hl.Var("x"), hl.Var("y")
    bx, by = hl.Func("blur_x"), hl.Func("blur_y")
    bx[x, y] = (inp[x, y] + inp[x + 1, y] + inp[x + 2, y]) * (1.0 / 3)
    by[x, y] = (bx[x, y] + bx[x, y + 1] + bx[x, y + 2]) * (1.0 / 3)
    return by


HALIDE = {"harris": harris_halide, "unsharp": unsharp_halide, "blur": blur_halide}
PIPELINES = [(name, HALO[name], make, ref, HALIDE[name]) for name, (make, ref) in EXAMPLES.items()]


# --------------------------------------------------------------------------- Halide

def load_halide(target):
    """(halide module, its Target, {autoscheduler name: plugin loaded}) or None."""
    try:
        import halide as hl
    except ImportError:
        return None
    os.environ["HL_NUM_THREADS"] = str(target.num_cores)
    lib = os.path.join(os.path.dirname(hl.__file__), "lib64")
    names = {}
    for name, so in (("Mullapudi2016", "mullapudi2016"), ("Adams2019", "adams2019"),
                     ("Li2018", "li2018")):
        path = os.path.join(lib, f"libautoschedule_{so}.so")
        try:
            hl.load_plugin(path if os.path.exists(path) else f"autoschedule_{so}")
            names[name] = True
        except Exception as e:  # a plugin that does not load is reported, not fatal
            print(f"Halide {name}: plugin did not load ({e})")
    ht = hl.get_host_target()
    if target.vector_bits < 512:     # build Halide for the same vector ISA as tdsl
        feats = [f for f in str(ht).split("-")[2:] if not f.startswith("avx512")
                 and not f.startswith("tune_")]
        ht = hl.Target("-".join(str(ht).split("-")[:2] + feats))
    return hl, ht, names


def halide_runner(hl, ht, sched, build, a, out_shape):
    """A callable that fills and returns an output array with Halide's pipeline
    auto-scheduled by `sched`."""
    inp = hl.ImageParam(hl.Float(32), 2, "input")
    inp.dim(0).set_estimate(0, a.shape[1])
    inp.dim(1).set_estimate(0, a.shape[0])
    out = build(hl, inp)
    out.set_estimates([hl.Range(0, out_shape[1]), hl.Range(0, out_shape[0])])
    p = hl.Pipeline(out)
    params = {"parallelism": str(int(os.environ["HL_NUM_THREADS"]))}
    if sched == "Mullapudi2016":
        params["last_level_cache_size"] = str(TARGET.cache_bytes(2))
    p.apply_autoscheduler(ht, hl.AutoschedulerParams(sched, params))
    p.compile_jit(ht)
    # Halide's schedules round tiles up and may read past the image; the input sits inside
    # a padded buffer so those reads land in memory (their results are never kept).
    padded = np.zeros((a.shape[0] + 2 * PAD, a.shape[1] + 2 * PAD), dtype=np.float32)
    padded[PAD:-PAD, PAD:-PAD] = a
    ib = hl.Buffer(padded)
    ib.set_min([-PAD, -PAD])
    inp.set(ib)
    res = np.zeros(out_shape, dtype=np.float32)
    buf = hl.Buffer(res)

    def run(keep=(padded, ib, inp)):     # hl.Buffer does not own the numpy memory
        p.realize(buf)
        return res
    return run


def halide_update_runner(hl, ht, sched, build, a, N):
    """A callable that fills and returns an (N, N) output with Halide's update pipeline
    `build`, scheduled by its app's schedule (`sched` "app") or an autoscheduler."""
    inp = hl.ImageParam(hl.Float(32), 2, "input")
    inp.dim(0).set_estimate(0, a.shape[1])
    inp.dim(1).set_estimate(0, a.shape[0])
    out = build(hl, inp, N, N, sched == "app")
    p = hl.Pipeline(out)
    if sched != "app":
        out.set_estimates([hl.Range(0, N), hl.Range(0, N)])
        params = {"parallelism": str(int(os.environ["HL_NUM_THREADS"]))}
        if sched == "Mullapudi2016":
            params["last_level_cache_size"] = str(TARGET.cache_bytes(2))
        p.apply_autoscheduler(ht, hl.AutoschedulerParams(sched, params))
    p.compile_jit(ht)
    ib = hl.Buffer(a)
    inp.set(ib)
    res = np.zeros((N, N), dtype=np.float32)
    buf = hl.Buffer(res)

    def run(keep=(a, ib, inp)):     # hl.Buffer does not own the numpy memory
        p.realize(buf)
        return res
    return run


def run_updates(opts, hal, N, only):
    """The pipelines written with update definitions: tdsl's auto_schedule and hand
    schedule beside Halide's app schedule and autoschedulers."""
    rng = np.random.default_rng(0)
    summary = []
    for name, (tdef, npref, hand) in UP.PIPELINES.items():
        if only and name not in only:
            continue
        a = rng.uniform(0.0, 1.0, (N + UP.HALO[name],) * 2).astype(np.float32)
        ref = npref(a).astype(np.float32)
        scale = np.abs(ref).max()
        fns = {}
        res = {}
        for kind in ("auto", "hand"):
            inp, out = tdef(N, N)
            s = tdsl.auto_schedule(out, TARGET) if kind == "auto" else hand(out, TARGET)
            if opts.explain and kind == "auto":
                print(s.explain())
            f = tdsl.build(s, [inp, out], target=TARGET)
            r = res[kind] = np.zeros((N, N), dtype=np.float32)
            f(a, r)
            err = np.abs(r - ref).max() / scale
            if err > 1e-4:
                raise SystemExit(f"{name}: tdsl {kind} WRONG vs numpy, max relative error {err:.2e}")
            fns[f"tdsl {kind}"] = (lambda f=f, r=r: f(a, r))
        if hal is not None:
            hl, ht, names = hal
            for sched in ["app"] + list(names):
                try:
                    run = halide_update_runner(hl, ht, sched, HALIDE_UPDATES[name], a, N)
                    herr = np.abs(run() - ref).max() / scale
                except Exception as e:
                    print(f"{name:14s} Halide {sched}: failed ({str(e).splitlines()[0][:90]})")
                    continue
                if herr > 1e-4:
                    print(f"{name:14s} Halide {sched}: differs from numpy by {herr:.2e}; not timed")
                    continue
                fns[f"Halide {sched}"] = run
        calls = 5 if N >= 4096 else 20
        best = block_times(fns, calls, blocks=opts.blocks)
        nbytes = (a.size + N * N) * 4
        for k, tt in best.items():
            print(f"{name:14s} {k:20s} {tt * 1e3:8.2f} {nbytes / tt / 1e9:7.1f} "
                  f"{best['tdsl auto'] / tt:9.2f} {best['tdsl hand'] / tt:9.2f}")
        autos = [tt for k, tt in best.items() if k.startswith("Halide") and k != "Halide app"]
        summary.append((name, best["tdsl auto"] / min(autos) if autos else None,
                        best["tdsl hand"] / best["Halide app"] if "Halide app" in best else None))
        print(f"{'':14s} load average {os.getloadavg()[0]:.2f}\n")
    for name, ra, rh in summary:
        fmt = (lambda v: "n/a" if v is None else f"{v:.2f}{' (at or below)' if v <= 1.0 else ''}")
        print(f"{name:14s} tdsl auto / best Halide autoscheduler: {fmt(ra)}; "
              f"tdsl hand / Halide app: {fmt(rh)}")


# --------------------------------------------------------------------------- timing

def block_times(fns, calls, blocks=5, warmup_s=0.15, pause_s=0.2):
    """Best seconds per call of each of `fns` (a dict), timed in interleaved blocks."""
    best = {k: float("inf") for k in fns}
    for _ in range(blocks):
        for k, fn in fns.items():
            t_end = time.perf_counter() + warmup_s
            fn()
            while time.perf_counter() < t_end:
                fn()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[k] = min(best[k], (time.perf_counter() - t0) / calls)
            time.sleep(pause_s)
    return best


TARGET = None
PAD = 256


def main():
    global TARGET
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="2048^2 instead of 4096^2")
    ap.add_argument("--explain", action="store_true", help="print tdsl's auto-schedule decisions")
    ap.add_argument("--only", default="", help="comma-separated pipeline names")
    ap.add_argument("--blocks", type=int, default=5)
    add_target_option(ap)
    opts = ap.parse_args()
    TARGET = target_from(opts)
    N = 2048 if opts.quick else 4096
    print(f"Image pipelines, float32 {N}x{N} output: tdsl.auto_schedule (no search) vs Halide's "
          "autoschedulers, same run\n")
    print_target(TARGET)
    hal = load_halide(TARGET)
    if hal is None:
        print("halide is not installed (pip install halide): Halide rows skipped\n")
    else:
        import halide
        print(f"Halide {getattr(halide, '__version__', '?')}, target {hal[1]}, "
              f"HL_NUM_THREADS={os.environ['HL_NUM_THREADS']}\n")
    only = [n for n in opts.only.split(",") if n]
    if not only or set(only) & set(UP.PIPELINES):
        print(f"{'update pipeline':14s} {'implementation':20s} {'ms':>8s} {'GB/s':>7s} "
              f"{'auto/this':>9s} {'hand/this':>9s}")
        run_updates(opts, hal, N, only)
        print()
        if only and not set(only) - set(UP.PIPELINES):
            return
    rng = np.random.default_rng(0)
    print(f"{'pipeline':9s} {'implementation':20s} {'ms':>8s} {'GB/s':>7s} {'tdsl/this':>9s}")
    summary = []
    for name, halo, tdef, npref, hdef in PIPELINES:
        if opts.only and name not in opts.only.split(","):
            continue
        a = rng.uniform(0.5, 1.5, (N + halo, N + halo)).astype(np.float32)
        ref = npref(a.astype(np.float64)).astype(np.float32)
        inp, out = tdef(N, N)
        s = tdsl.auto_schedule(out, TARGET)
        if opts.explain:
            print(s.explain())
        f = tdsl.build(s, [inp, out], target=TARGET)
        res = np.zeros((N, N), dtype=np.float32)
        f(a, res)
        scale = np.abs(ref).max()
        err = np.abs(res - ref).max() / scale
        if err > 1e-4:
            raise SystemExit(f"{name}: tdsl WRONG vs numpy, max relative error {err:.2e}")
        fns = {"tdsl auto": lambda: f(a, res)}
        if hal is not None:
            hl, ht, names = hal
            for sched in names:
                try:
                    run = halide_runner(hl, ht, sched, hdef, a, (N, N))
                except Exception as e:
                    print(f"{name:9s} Halide {sched}: failed ({str(e).splitlines()[0][:80]})")
                    continue
                herr = np.abs(run() - res).max() / scale
                if herr > 1e-4:
                    raise SystemExit(f"{name}: Halide {sched} differs from tdsl by {herr:.2e}")
                fns[f"Halide {sched}"] = run
        calls = 10 if N >= 4096 else 30
        best = block_times(fns, calls, blocks=opts.blocks)
        nbytes = (a.size + N * N) * 4
        t_tdsl = best["tdsl auto"]
        for k, tt in best.items():
            print(f"{name:9s} {k:20s} {tt * 1e3:8.2f} {nbytes / tt / 1e9:7.1f} {t_tdsl / tt:9.2f}")
        hal_best = min((tt for k, tt in best.items() if k != "tdsl auto"), default=None)
        if hal_best is not None:
            summary.append((name, t_tdsl / hal_best))
        print()
    for name, r in summary:
        print(f"{name:9s} tdsl / best Halide: {r:.2f}{'  (at or below)' if r <= 1.0 else ''}")


if __name__ == "__main__":
    main()
