"""What every benchmark prints first: the target it builds for and the machine's measured
fp32 FMA peak (a tdsl kernel, `tdsl.examples.peak`), so each kernel's share of it can be
reported beside its ratio to the reference measured in the same run."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tdsl  # noqa: E402
from tdsl.examples import peak  # noqa: E402


def add_target_option(parser):
    parser.add_argument("--mcpu", default="",
                        help="build for this CPU (e.g. haswell, znver3) instead of the host's; "
                             "it must run on this machine")


def target_from(args) -> "tdsl.target.Target":
    t = tdsl.target.Target(f"llvm -mcpu={args.mcpu}" if args.mcpu else "llvm")
    if not t.runs_here:
        raise SystemExit(f"--mcpu {args.mcpu}: this machine cannot run code for it")
    return t


def print_target(t) -> float:
    """Prints the target and returns its measured FMA peak in GFLOP/s."""
    host = tdsl.target.Target.host()
    print(t.describe())
    if t != host:
        print(f"{'host':>12s}: {host.cpu}, {host.vector_bits}-bit vectors")
    gflops, chains = peak.measure(t)
    print(f"{'FMA peak':>12s}: {gflops:.1f} GFLOP/s fp32 (measured: {chains} FMA chains per core "
          f"on {t.num_cores} cores)\n")
    return gflops
