"""The tuning curve: best GFLOP/s (or time) so far against the trial number.

matplotlib is imported only here, when a plot is asked for (`pip install 'tdsl[plot]'`).
"""
from __future__ import annotations

import os
from typing import List

from .record import Record, load


def _records(source) -> List[Record]:
    if isinstance(source, (str, os.PathLike)):
        return load(source)
    recs = getattr(source, "records", None)
    if recs is not None:
        return list(recs)
    return list(source)


def tuning_curve(source):
    """(trials, values, best_so_far, use_gflops): per record in trial order, its GFLOP/s
    (None when it failed) and the best so far; when no record knows its FLOPs, values are
    milliseconds and the best is the lowest."""
    recs = sorted(_records(source), key=lambda r: (r.trial, r.timestamp))
    use_gflops = any(r.gflops for r in recs if r.ok)
    trials, vals, best = [], [], []
    cur = None
    for n, r in enumerate(recs, 1):
        v = (r.gflops if use_gflops else r.seconds * 1e3) if r.ok else None
        if v is not None and (cur is None or (v > cur if use_gflops else v < cur)):
            cur = v
        trials.append(r.trial or n)
        vals.append(v)
        best.append(cur)
    return trials, vals, best, use_gflops


def plot_tuning_curve(source, ax=None, label=None, show_trials=True):
    """Plots the best-so-far curve of a log file, a TuneResult or a list of records on a
    matplotlib axis (a new figure when none is given) and returns the axis. Each measured
    trial is a dot; failed trials are marked with an x on the horizontal axis."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plot_tuning_curve needs matplotlib: pip install matplotlib "
                          "(or pip install 'tdsl[plot]')") from e
    trials, vals, best, use_gflops = tuning_curve(source)
    new_figure = ax is None
    if new_figure:
        _, ax = plt.subplots(figsize=(6, 3.5))
    xs = [t for t, b in zip(trials, best) if b is not None]
    ys = [b for b in best if b is not None]
    ax.step(xs, ys, where="post", label=label or "best so far")
    if show_trials:
        ok = [(t, v) for t, v in zip(trials, vals) if v is not None]
        if ok:
            ax.plot([t for t, _ in ok], [v for _, v in ok], ".", alpha=0.4, label="trials")
        bad = [t for t, v in zip(trials, vals) if v is None]
        if bad:
            ax.plot(bad, [0] * len(bad), "x", color="red", label="failed")
    ax.set_xlabel("trial")
    ax.set_ylabel("GFLOP/s" if use_gflops else "time (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    if new_figure:
        ax.figure.tight_layout()
    return ax
