"""The clocks read while a timing pass runs (kernlog.run.clocks): NVML through ctypes, the GPU's highest
SM clock beside the samples, and the one line `kernlog profile` prints where a pass ran throttled. No GPU
needed: NVML is stood in for."""
import ctypes

from kernlog.judge.verdicts import throttled
from kernlog.run import clocks


class FakeNvml:
    """libnvidia-ml's four calls kernlog makes, on a GPU whose SM runs at `sm` under a boost of `top`."""

    def __init__(self, sm=1845, top=1980, mem=3201):
        self.values = {clocks.NVML_CLOCK_SM: sm, clocks.NVML_CLOCK_MEM: mem}
        self.top = top

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        return 0

    def nvmlDeviceGetClockInfo(self, handle, which, out):
        out._obj.value = self.values[which.value]
        return 0

    def nvmlDeviceGetMaxClockInfo(self, handle, which, out):
        if self.top is None:
            return 3  # NVML_ERROR_NOT_SUPPORTED
        out._obj.value = self.top
        return 0


def test_a_pass_records_the_gpus_highest_sm_clock_beside_its_samples(monkeypatch):
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeNvml())
    c = clocks.Clocks()
    for _ in range(3):
        c.sample()
    s = c.summary()
    assert s["sm_mhz"]["median"] == 1845 and s["mem_mhz"]["median"] == 3201 and s["sm_max_mhz"] == 1980
    monkeypatch.setattr(ctypes, "CDLL", lambda name: FakeNvml(top=None))
    assert clocks.Clocks().summary()["sm_max_mhz"] is None


def test_a_throttled_pass_is_one_line_and_a_full_clock_pass_none():
    s = {"sm_mhz": {"median": 1845.0}, "sm_max_mhz": 1980.0}
    line = throttled(s, 0.035)
    assert "1845 MHz" in line and "7% under this GPU's 1980" in line and "--force" in line
    assert throttled({"sm_mhz": {"median": 1965.0}, "sm_max_mhz": 1980.0}, 0.035) == ""  # 0.8% under
    assert throttled(s, 0.10) == ""  # inside a wider band
    assert throttled({"sm_mhz": {"median": 1845.0}, "sm_max_mhz": None}, 0.035) == ""  # no boost read
    assert throttled({"sm_mhz": None, "sm_max_mhz": 1980.0}, 0.035) == ""  # no NVML
