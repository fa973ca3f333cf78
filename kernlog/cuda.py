"""CUDA C revisions: compiled by NVRTC through CuPy, launched on torch's current stream.

CuPy is imported only when a CUDA revision is loaded, so the tool imports without it.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# Line info lets ncu attribute stalls to source lines; sm_90 is set by CuPy from the device.
NVRTC_OPTIONS = ("-lineinfo", "--std=c++17")
COMMON_INCLUDE = Path(__file__).resolve().parent.parent / "kernels" / "common"


def _includes_digest(source: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for d in (COMMON_INCLUDE, source.resolve().parent):
        for f in sorted(d.glob("*.cu*")):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def load_module(source: Path, names: Sequence[str], options: Sequence[str] = ()):
    """Compile `source` once and return {name: cupy.RawKernel} for the extern "C" `names`."""
    import cupy

    code = Path(source).read_text()
    # CuPy caches binaries by this text: name the included files' contents in it, so an
    # edited header or included .cu is never served from a stale cache.
    code += f"\n// kernlog includes: {_includes_digest(Path(source))}\n"
    opts = NVRTC_OPTIONS + (f"-I{COMMON_INCLUDE}", f"-I{Path(source).resolve().parent}") + tuple(options)
    module = cupy.RawModule(code=code, options=opts, name_expressions=None)
    return {name: module.get_function(name) for name in names}


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
        kernel.max_dynamic_shared_size_bytes = shared_mem
        kernel._kl_smem = shared_mem
    kernel(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem, stream=stream)


def ptr(tensor):
    import numpy

    return numpy.uint64(tensor.data_ptr())


def compile_report(source: Path, arch: str = "sm_90") -> str:
    """ptxas' resource report (registers, spills) for `source`, from nvcc on this machine."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["nvcc", f"-arch={arch}", "-cubin", "-lineinfo", "--std=c++17", "-Xptxas", "-v",
               f"-I{COMMON_INCLUDE}", f"-I{Path(source).resolve().parent}",
               "-o", str(Path(tmp) / "out.cubin"), str(source)]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed on {source}:\n{done.stderr}")
    return done.stderr
