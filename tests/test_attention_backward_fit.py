"""attention_backward's `fitting` (v1_tuned, used by v2_split and v3_ordered): on a Hopper GPU with the
H100's shared memory every candidate is kept and none launched (the untimed gate then compiles only the
layout it takes); elsewhere each is launched once and one too big for the GPU dropped. No GPU needed:
the device's caps are stood in for."""
import torch
from triton.runtime.errors import OutOfResources

from kernels.attention_backward import v1_tuned
from kernlog import cuda


def _caps(major, smem):
    return cuda.DeviceCaps(name="stand-in", capability=(major, 0), sm_count=132, smem_per_block_optin=smem,
                           cluster_launch=major >= 9)


def _launch(too_big):
    launched = []

    def launch(c):
        launched.append(c)
        if c in too_big:
            raise OutOfResources(300 * 1024, 227 * 1024, "shared memory")
    return launch, launched


def test_on_hopper_every_candidate_is_kept_and_none_launched(monkeypatch):
    monkeypatch.setattr(cuda, "device_caps", lambda device: _caps(9, 227 * 1024))
    layouts = [(64, 64, 4, 2), (128, 64, 8, 4)]
    launch, launched = _launch(too_big=())
    assert v1_tuned.fitting(launch, layouts, torch.device("cuda")) == layouts
    assert launched == []


def test_elsewhere_each_is_launched_and_one_too_big_dropped(monkeypatch):
    layouts = [(64, 64, 4, 2), (128, 64, 8, 4)]
    for caps in (_caps(8, 163 * 1024), _caps(9, 99 * 1024)):  # an A100; a Hopper part with less
        monkeypatch.setattr(cuda, "device_caps", lambda device, caps=caps: caps)
        launch, launched = _launch(too_big={(128, 64, 8, 4)})
        assert v1_tuned.fitting(launch, layouts, torch.device("cuda")) == [(64, 64, 4, 2)]
        assert launched == layouts
    launch, launched = _launch(too_big=())  # no device named: launched, as before
    assert v1_tuned.fitting(launch, layouts) == layouts and launched == layouts


# The layouts whose fit on Hopper was measured (every one launched on an H200, 2026-11-29): a layout added
# to v1_tuned.CANDIDATES is kept there unlaunched, so its fit must be measured again before it joins.
MEASURED_FITS = {
    "bf16": ([(64, 64, 4, 2), (32, 64, 4, 4), (64, 64, 4, 3), (32, 64, 4, 3)],
             [(128, 64, 8, 4), (64, 64, 4, 4), (64, 64, 4, 3), (64, 32, 4, 3)]),
    "fp32": ([(32, 64, 4, 2), (16, 64, 8, 2), (32, 32, 4, 2), (64, 64, 4, 2)],
             [(64, 32, 4, 2), (64, 16, 8, 2), (32, 32, 4, 2), (64, 64, 4, 2)]),
}


def test_hopper_keeps_only_layouts_whose_fit_was_measured():
    assert v1_tuned.CANDIDATES == MEASURED_FITS, (
        "a new layout: launch it once on an H100 or H200 (.devrun-style warm script, every loop form and group "
        "size at head dims 16-128), then add it to MEASURED_FITS")


def test_every_picker_asks_fitting_with_the_device():
    """Without the device, fitting launches every candidate again (the cold gate's cost)."""
    import inspect

    from kernels.attention_backward import v2_split, v3_ordered

    for module in (v1_tuned, v2_split, v3_ordered):
        calls = [line for line in inspect.getsource(module).splitlines() if "fitting(" in line
                 and "def fitting" not in line]
        assert calls and all("q.device)" in line for line in calls), (module.__name__, calls)
