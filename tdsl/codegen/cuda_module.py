"""`CUDAModule`: the runtime's `DeviceModule` plus what ptxas says about its kernels.

Defined in codegen because it runs a compiler (`ptxas.py`); the runtime, which may not
import codegen, gets it by duck typing (`display.py` shows `resources()` when it exists).
Nothing runs ptxas until it is asked, and reports are cached by what ptxas read.
"""
from __future__ import annotations

from typing import List

from ..gpu_arch import REPORTED
from ..runtime.device_module import DeviceModule
from . import ptxas


class CUDAModule(DeviceModule):

    def resources(self, arch: str = None, tool: str = "auto") -> List[ptxas.KernelResources]:
        """Registers, spills, stack, shared memory and occupancy of each kernel on `arch`
        ("sm_80", "sm_90"; both, in that order, when None). BuildError without NVRTC or ptxas."""
        archs = list(REPORTED) if arch is None else [arch]
        return [r for a in archs for r in ptxas.resources(self.source, self.kernels, a, tool)]

    def get_source(self, fmt: str = ""):
        """As `DeviceModule.get_source`; 'ptxas' gives ptxas's `-v` report for each of
        sm_80 and sm_90 ('ptxas:sm_90' for one)."""
        if fmt == "ptxas" or fmt.startswith("ptxas:"):
            archs = [fmt.partition(":")[2]] if ":" in fmt else list(REPORTED)
            return "\n".join(ptxas.report(self.source, a) for a in archs)
        return super().get_source(fmt)
