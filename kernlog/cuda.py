"""CUDA C revisions: compiled by NVRTC through CuPy, launched on torch's current stream; and
what the GPU can do (`device_caps`), which every launcher sizes itself by and checks its
revision's needs against (`require`).

CuPy is imported only when a CUDA revision is first launched, so the tool imports without it.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import KernlogError, NoGpu, Unsupported

# Line info lets ncu attribute stalls to source lines; the architecture (sm_90 on the H100) is
# CuPy's pick for the device.
NVRTC_OPTIONS = ("-lineinfo", "--std=c++17")
# The headers every ladder shares (kl_cuda.cuh): package data, so a non-editable install has them.
COMMON_INCLUDE = Path(__file__).resolve().parent / "include"
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def include_dirs(source: Path) -> tuple[Path, Path]:
    """Where the quoted #includes of `source` are looked up, in order: beside it, then COMMON_INCLUDE."""
    return Path(source).resolve().parent, COMMON_INCLUDE


def includes(source: Path) -> tuple[Path, ...]:
    """Every file `source` #includes in quotes, and every file those include, each once, in the
    order met. Each is looked up beside the file naming it, then in include_dirs(source), as
    NVRTC and nvcc look; one found nowhere is an error here, as it would be in the compiler."""
    source = Path(source).resolve()
    found: dict[Path, None] = {}

    def follow(f: Path) -> None:
        for name in _INCLUDE.findall(f.read_text()):
            path = next((p for d in (f.parent, *include_dirs(source)) if (p := (d / name).resolve()).is_file()), None)
            if path is None:
                raise KernlogError(f'{f}: #include "{name}" is neither beside it nor in {COMMON_INCLUDE}')
            if path != source and path not in found:
                found[path] = None
                follow(path)

    follow(source)
    return tuple(found)


def _digest(source: Path, options: Sequence[str]) -> str:
    h = hashlib.sha256()
    for f in (source, *includes(source)):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    h.update("\0".join(options).encode())
    return h.hexdigest()[:16]


_MODULES: dict = {}  # (source, digest of it, its includes and options, names) -> {name: RawKernel}


def load_module(source: Path, names: Sequence[str], options: Sequence[str] = ()):
    """Compile `source` once per process and return {name: cupy.RawKernel} for the extern "C" `names`."""
    source = Path(source).resolve()
    opts = NVRTC_OPTIONS + tuple(f"-I{d}" for d in include_dirs(source)) + tuple(options)
    digest = _digest(source, opts)
    key = (source, digest, tuple(names))
    if key not in _MODULES:
        import cupy

        # CuPy caches binaries by this text: name the included files' contents in it, so an
        # edited header or included .cu is never served from a stale cache.
        code = source.read_text() + f"\n// kernlog includes: {digest}\n"
        module = cupy.RawModule(code=code, options=opts, name_expressions=None)
        _MODULES[key] = {name: module.get_function(name) for name in names}
    return _MODULES[key]


_STREAMS: dict = {}  # torch stream handle -> cupy.cuda.ExternalStream


def launch(kernel, grid, block, args, shared_mem: int = 0) -> None:
    """Launch a RawKernel on torch's current CUDA stream; raises if the launch failed.

    Pass pointers as `ptr(tensor)` and scalars as numpy.int32 / numpy.float32: CuPy
    sizes each argument from its numpy type. Host cost matters: on the H100 a launcher
    that re-read its source per call added ~70 us to a 10 us kernel, so everything
    here is cached.
    """
    import cupy
    import torch

    handle = torch.cuda.current_stream().cuda_stream
    stream = _STREAMS.get(handle)
    if stream is None:
        stream = _STREAMS[handle] = cupy.cuda.ExternalStream(handle)
    if shared_mem > 48 * 1024 and getattr(kernel, "_kl_smem", 0) < shared_mem:
        require(None, smem=shared_mem)
        kernel.max_dynamic_shared_size_bytes = shared_mem
        kernel._kl_smem = shared_mem
    kernel(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem, stream=stream)


def ptr(tensor):
    import numpy

    return numpy.uint64(tensor.data_ptr())


def compile_report(source: Path, arch: str | None = None) -> str:
    """ptxas' resource report (registers, spills) for `source`, from nvcc on this machine, for
    `arch` (e.g. "sm_90"; default: this machine's GPU)."""
    import subprocess
    import tempfile

    arch = arch or device_caps().arch
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["nvcc", f"-arch={arch}", "-cubin", "-lineinfo", "--std=c++17", "-Xptxas", "-v",
               *(f"-I{d}" for d in include_dirs(source)), "-o", str(Path(tmp) / "out.cubin"), str(source)]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed on {source}:\n{done.stderr}")
    return done.stderr


# ---- What the GPU can do. Launchers size grids and prune configs by these numbers and check
# what their revision needs with `require`; nothing here assumes the H100.
@dataclass(frozen=True)
class DeviceCaps:
    name: str
    capability: tuple[int, int]
    sm_count: int
    smem_per_block_optin: int  # bytes of shared memory one block may opt in to (227 KiB on the H100)
    cluster_launch: bool  # thread-block clusters

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


# feature -> (what it is, in the skip line; the compute capability that brought it; whether `caps` has it)
FEATURES = {
    "clusters": ("thread-block clusters", (9, 0), lambda caps: caps.cluster_launch),
    "tma": ("TMA bulk tensor copies", (9, 0), lambda caps: caps.capability >= (9, 0)),
}
# CUdevice_attribute values, from CUDA 13.0's cuda.h
_ATTRIBUTES = {"sm_count": 16, "major": 75, "minor": 76, "smem_per_block_optin": 97, "cluster_launch": 120}
_CAPS: dict[int, DeviceCaps] = {}  # device index -> its caps, read once


def device_caps(device=None) -> DeviceCaps:
    """The caps of `device` (a torch.device, "cuda:1", an index; None: the current device), read
    from the CUDA driver on first use."""
    index = _index(device)
    caps = _CAPS.get(index)
    if caps is None:
        caps = _CAPS[index] = _query(index)
    return caps


def require(device, features: Sequence[str] = (), smem: int = 0) -> DeviceCaps:
    """`device`'s caps if it has every one of `features` (FEATURES' names) and `smem` bytes of
    shared memory per block; else Unsupported, naming what is missing in one line."""
    caps = device_caps(device)
    for feature in features:
        what, (major, minor), has = FEATURES[feature]
        if not has(caps):
            raise Unsupported(f"needs {what} (compute capability {major}.{minor}), "
                              f"this GPU ({caps.name}) is {caps.capability[0]}.{caps.capability[1]}")
    if smem > caps.smem_per_block_optin:
        raise Unsupported(f"needs {smem / 1024:g} KiB of shared memory per block, "
                          f"this GPU ({caps.name}) has {caps.smem_per_block_optin / 1024:g} KiB")
    return caps


def _index(device) -> int:
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        index = int(device.rsplit(":", 1)[1]) if ":" in device else None
    else:
        index = getattr(device, "index", None)  # a torch.device
    if index is None:
        import torch

        index = torch.cuda.current_device()
    return index


def _query(index: int) -> DeviceCaps:
    """The driver API through ctypes: libcuda is wherever a GPU is, with or without CuPy, and it
    reports what torch's device properties lack (cluster launch)."""
    import ctypes

    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise NoGpu("no CUDA driver (libcuda.so.1) on this machine: CUDA revisions run on a GPU machine") from None

    def call(fn, *args, may_fail=False) -> bool:
        status = getattr(driver, fn)(*args)
        if status != 0 and not may_fail:
            raise NoGpu(f"the CUDA driver's {fn} failed (CUresult {status}) for device {index}")
        return status == 0

    dev, value, name = ctypes.c_int(), ctypes.c_int(), ctypes.create_string_buffer(256)
    call("cuInit", 0)
    call("cuDeviceGet", ctypes.byref(dev), index)
    call("cuDeviceGetName", name, len(name), dev)
    attrs = {}
    for key, attr in _ATTRIBUTES.items():
        # A driver older than clusters does not know attribute 120: then the GPU has none.
        ok = call("cuDeviceGetAttribute", ctypes.byref(value), attr, dev, may_fail=key == "cluster_launch")
        attrs[key] = value.value if ok else 0
    return DeviceCaps(name.value.decode(), (attrs["major"], attrs["minor"]), attrs["sm_count"],
                      attrs["smem_per_block_optin"], bool(attrs["cluster_launch"]))
