"""NVIDIA GPU architectures: one record each (`SMArch`) with every fact tdsl reads, and the
occupancy a kernel's resources allow.

The record is the one table of architectures: `Target("cuda -arch=sm_NN")` takes its SM
count, shared memory and thread limits from it (`Target.gpu`, a `GPUFacts`), and the
occupancy calculator its per-SM allocation rules. The SM count is the usual part's
(the device itself answers for plain "cuda" when one is present).

The rules are the CUDA occupancy calculator's (`cuda_occupancy.h`): a block's warps are
placed whole; registers are allocated per warp in units of 256 and split between the SM's
four sub-partitions, so a warp count limited by registers is a multiple of four; every block
also holds 1 KiB of shared memory the system reserves, and shared memory is allocated in
units of 128 bytes. Shared memory per SM is the largest carve-out (the driver picks a
carve-out that fits the kernel's need), so the figure is the best the kernel can get.
"""
from __future__ import annotations

from dataclasses import dataclass

KiB = 1 << 10


@dataclass(frozen=True)
class SMArch:
    name: str
    sm_count: int                     # SMs of the usual part
    max_warps: int = 64               # resident warps per SM
    max_blocks: int = 32
    max_threads_per_block: int = 1024
    registers: int = 65536
    register_unit: int = 256          # registers are allocated per warp in these units
    max_registers_per_thread: int = 255
    sub_partitions: int = 4
    shared_bytes: int = 164 * KiB     # per SM, the largest carve-out
    shared_unit: int = 128
    shared_reserved_per_block: int = 1 * KiB
    static_shared_per_block: int = 48 * KiB   # what one block may declare statically
    warp_size: int = 32

    @property
    def max_shared_per_block(self) -> int:
        """What one block may use with dynamic shared memory (opted in at launch)."""
        return self.shared_bytes - self.shared_reserved_per_block

    @property
    def max_threads(self) -> int:
        """Resident threads per SM."""
        return self.max_warps * self.warp_size


ARCHS = {
    "sm_70": SMArch("sm_70", 80, shared_bytes=96 * KiB),                              # V100
    "sm_75": SMArch("sm_75", 40, max_warps=32, max_blocks=16, shared_bytes=64 * KiB),  # T4
    "sm_80": SMArch("sm_80", 108, shared_bytes=164 * KiB),                             # A100
    "sm_86": SMArch("sm_86", 84, max_warps=48, max_blocks=16, shared_bytes=100 * KiB),  # RTX 3090, A40
    "sm_89": SMArch("sm_89", 128, max_warps=48, max_blocks=24, shared_bytes=100 * KiB),  # RTX 4090, L40
    "sm_90": SMArch("sm_90", 132, shared_bytes=228 * KiB),                             # H100 SXM
}
DEFAULT = "sm_80"    # what an unknown architecture is sized as
REPORTED = ("sm_80", "sm_90")   # the architectures `resources()` reports when not told one


@dataclass(frozen=True)
class Occupancy:
    arch: str
    blocks_per_sm: int
    warps_per_sm: int
    max_warps: int
    limiter: str       # what bounds blocks_per_sm: "blocks", "warps", "registers", "shared"

    @property
    def fraction(self) -> float:
        return self.warps_per_sm / self.max_warps

    def __str__(self):
        return (f"{self.fraction:.0%} on {self.arch} ({self.blocks_per_sm} blocks of "
                f"{self.warps_per_sm // max(self.blocks_per_sm, 1)} warps, {self.limiter})")


def _round_up(n, unit):
    return -(-n // unit) * unit


def occupancy(arch: str, threads: int, registers: int, shared_bytes: int = 0) -> Occupancy:
    """Resident blocks and warps per SM for blocks of `threads` threads using `registers`
    registers per thread and `shared_bytes` of static plus dynamic shared memory."""
    a = ARCHS[arch]
    warps = -(-threads // a.warp_size)
    if threads < 1 or threads > a.max_threads_per_block:
        raise ValueError(f"{threads} threads per block: {arch} allows 1 to {a.max_threads_per_block}")
    if registers > a.max_registers_per_thread:
        raise ValueError(f"{registers} registers per thread: {arch} allows {a.max_registers_per_thread}")
    limits = {"blocks": a.max_blocks, "warps": a.max_warps // warps}
    if registers > 0:
        per_warp = _round_up(registers * a.warp_size, a.register_unit)
        warps_by_regs = (a.registers // a.sub_partitions // per_warp) * a.sub_partitions
        limits["registers"] = warps_by_regs // warps
    per_block = _round_up(shared_bytes + a.shared_reserved_per_block, a.shared_unit)
    limits["shared"] = a.shared_bytes // per_block
    limiter = min(limits, key=lambda k: limits[k])     # the first listed wins a tie
    blocks = limits[limiter]
    return Occupancy(arch, blocks, blocks * warps, a.max_warps, limiter)
