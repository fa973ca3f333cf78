"""SM and memory clocks read through NVML while a timing pass runs.

NVML is reached through ctypes (libnvidia-ml.so.1 ships with the driver), so no Python
package is needed; where it cannot be loaded the clocks are recorded as not collected.
"""
from __future__ import annotations

import ctypes
import statistics

NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2


class Clocks:
    def __init__(self, index: int = 0):
        self.sm: list[float] = []
        self.mem: list[float] = []
        self.sm_max: float | None = None  # the GPU's highest SM clock (its boost), where NVML gives it
        self._lib = self._handle = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
                return
            self._lib, self._handle = lib, handle
            mhz = ctypes.c_uint()
            if lib.nvmlDeviceGetMaxClockInfo(handle, ctypes.c_int(NVML_CLOCK_SM), ctypes.byref(mhz)) == 0:
                self.sm_max = float(mhz.value)
        except (OSError, AttributeError):
            pass

    def _read(self, which: int) -> float | None:
        mhz = ctypes.c_uint()
        if self._lib.nvmlDeviceGetClockInfo(self._handle, ctypes.c_int(which), ctypes.byref(mhz)) != 0:
            return None
        return float(mhz.value)

    def sample(self) -> None:
        """Read both clocks now (a few microseconds of host time, none of the GPU's)."""
        if self._lib is None:
            return
        for which, out in ((NVML_CLOCK_SM, self.sm), (NVML_CLOCK_MEM, self.mem)):
            v = self._read(which)
            if v is not None:
                out.append(v)

    def summary(self) -> dict:
        def stats(vals):
            return ({"min": min(vals), "median": statistics.median(vals), "max": max(vals), "n": len(vals)}
                    if vals else None)
        return {"sm_mhz": stats(self.sm), "mem_mhz": stats(self.mem), "sm_max_mhz": self.sm_max,
                "source": "nvml" if self._lib else None}
