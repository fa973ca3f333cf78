"""What the GPU can do, read once from the driver (kernlog.cuda.device_caps), and the one-line
Unsupported a revision raises for what its GPU lacks. CPU tests use made-up devices; the
GPU-marked one reads the real device."""
import pytest
import torch

from kernels.common import tuning
from kernlog import cuda
from kernlog.errors import KernlogError, Unsupported

from .helpers import A100, H100, L4, fake_gpu


@pytest.mark.parametrize("caps,features,smem,line", [
    (A100, ("clusters",), 0, "needs thread-block clusters (compute capability 9.0), "
                             "this GPU (NVIDIA A100-SXM4-80GB) is 8.0"),
    (L4, ("tma",), 0, "needs TMA bulk tensor copies (compute capability 9.0), this GPU (NVIDIA L4) is 8.9"),
    (A100, (), 192 * 1024, "needs 192 KiB of shared memory per block, this GPU (NVIDIA A100-SXM4-80GB) has 163 KiB"),
    (H100, (), 228 * 1024, "needs 228 KiB of shared memory per block, this GPU (NVIDIA H100 80GB HBM3) has 227 KiB"),
])
def test_what_a_gpu_lacks_is_one_line(monkeypatch, caps, features, smem, line):
    fake_gpu(monkeypatch, caps)
    with pytest.raises(Unsupported) as exc:
        cuda.require("cuda:0", features, smem=smem)
    assert str(exc.value) == line and isinstance(exc.value, KernlogError)


@pytest.mark.parametrize("caps", [H100, A100, L4], ids=["h100", "a100", "l4"])
def test_what_a_gpu_has_passes(monkeypatch, caps):
    fake_gpu(monkeypatch, caps)
    needs = ("clusters", "tma") if caps.capability >= (9, 0) else ()
    assert cuda.require("cuda:0", needs, smem=caps.smem_per_block_optin) == caps


@pytest.mark.parametrize("caps", [H100, A100], ids=["h100", "a100"])
def test_persistent_grids_follow_the_sm_count(monkeypatch, caps):
    fake_gpu(monkeypatch, caps)
    assert tuning.sm_count(torch.device("cuda", 0)) == caps.sm_count


def test_devices_are_named_as_torch_names_them(monkeypatch):
    assert cuda._index(3) == 3
    assert cuda._index("cuda:2") == 2
    assert cuda._index(torch.device("cuda", 1)) == 1
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 5)
    assert cuda._index(None) == cuda._index("cuda") == cuda._index(torch.device("cuda")) == 5


def test_caps_are_read_once_per_device(monkeypatch):
    reads = []
    monkeypatch.setattr(cuda, "_CAPS", {})
    monkeypatch.setattr(cuda, "_query", lambda index: reads.append(index) or (A100 if index else H100))
    assert cuda.device_caps(0) is H100 and cuda.device_caps("cuda:1") is A100 and cuda.device_caps(0) is H100
    assert reads == [0, 1]
    assert H100.arch == "sm_90" and L4.arch == "sm_89"


@pytest.mark.gpu
def test_the_real_device_as_torch_sees_it():
    caps = cuda.device_caps()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    assert (caps.name, caps.capability, caps.sm_count) == (props.name, (props.major, props.minor),
                                                           props.multi_processor_count)
    assert caps.cluster_launch == (caps.capability >= (9, 0))
    assert caps.smem_per_block_optin >= 48 * 1024
    if hasattr(props, "shared_memory_per_block_optin"):
        assert caps.smem_per_block_optin == props.shared_memory_per_block_optin


def test_the_triton_pipeline_keeps_to_the_gpus_shared_memory(monkeypatch):
    from kernels.softmax import softmax_triton as st

    fake_gpu(monkeypatch, H100)
    assert st.pipe_smem("cuda:0") == st.PIPE_SMEM  # 227 KiB less the headroom measured there
    fake_gpu(monkeypatch, L4)
    smem = st.pipe_smem("cuda:0")
    kept = st.pipe_configs(32000, 2, smem)
    assert all((kw["STAGES"] - 1) * kw["BLOCK"] * 2 <= smem for _, _, kw in kept)
    assert len(kept) < len(st.pipe_configs(32000, 2, st.PIPE_SMEM))
