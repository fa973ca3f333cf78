"""The launcher of cu13_multicast: cu12's launch, except where cu12's plan takes its own 128x256 kernel
and B's row stride is 16 mod 32 bytes (N = 8 mod 16, as at N = 5000); there cu13_multicast.cu's
mm_stages_mc, its blocks in clusters of two M-neighbour tiles loading B once between them. Its own file:
cuda_stages.py is hashed by cu12's profiles.
"""
from __future__ import annotations

from collections.abc import Callable

from . import cuda_launch as cl
from . import cuda_persistent as cp
from . import cuda_splitk as cs
from . import cuda_stages as cst

NAMES = ("mm_stages_mc", *cst.NAMES)


def slow_stride(N: int) -> bool:
    """B's rows start 16 bytes into a 32-byte sector every other row: N = 8 mod 16 bf16 columns."""
    return (2 * N) % 32 == 16


def plan_multicast(M, N, K, aligned, sms: int = cp.SMS, clusters: dict[int, int] = cs.CLUSTERS):
    """cu12's plan, with this kernel where that plan takes cu12's and B's stride is slow: one cluster of
    two blocks a pair of row tiles, as many clusters as are resident at once (clusters[2]: cu11's pairs
    hold an SM a block, as this kernel's blocks do) or as there are pairs; cu12's where no pair is resident."""
    step = cst.plan_stages(M, N, K, aligned, sms, clusters)
    if step.kernel != "mm_stages" or not slow_stride(N) or not clusters.get(2):
        return step  # (no pair resident at once: a grid of none)
    pairs = cl._cdiv(cl._cdiv(M, 128), 2) * cl._cdiv(N, 256)
    return cl.Launch("mm_stages_mc", (2 * min(clusters[2], pairs), 1, 1), (cp.P9_THREADS, 1, 1),
                     cst.P12_SMEM_BYTES, tma=True)


PLANS = {"cu13_multicast": ("cu13_multicast.cu", plan_multicast, NAMES)}


def loader() -> Callable[[], Callable]:
    """Revision.load for cu13_multicast: cu12's launch (its checks, plan, edges and splits) unless the
    plan takes this kernel."""
    src = cl.CUDA_DIR / PLANS["cu13_multicast"][0]

    def load():
        import numpy
        import torch

        from kernlog import cuda
        from kernlog.errors import Unsupported

        stages = cst.loader()()
        state: dict = {}  # device -> (SM count, resident clusters by size); "kernel" once built
        maps: dict = {}  # (device, A, B, C pointers, M, N, K) -> device tensor of the three maps
        steps: dict = {}  # (device, M, N, K) -> the plan's Launch

        def device_plan(device):
            """(SM count, clusters resident at once by size), read from cu11's split kernels in this
            module (cu13_multicast.cu includes them), as cu11's and cu12's launchers read them."""
            import ctypes

            built = cl.load_sm90a(src, cs.NAMES[:-len(cs.cw.NAMES)])
            clusters = {}
            for s in sorted({s for ss in cs.SPLITS.values() for s in ss}):
                bn = max(b_ for b_, ss in cs.SPLITS.items() if s in ss)
                fn = built[f"mm_splitk_n{bn}_s{s}"]
                if s == 16:
                    ctypes.CDLL("libcuda.so.1").cuFuncSetAttribute(ctypes.c_void_p(fn.kernel.ptr),
                                                                   cs.NON_PORTABLE_CLUSTER, 1)
                kernel = cl.OptIn(fn)
                kernel.max_dynamic_shared_size_bytes = cs.smem_bytes(bn)  # the query needs the opt-in
                clusters[s] = cs.resident_clusters(kernel.fn, cs.smem_bytes(bn), s)
            return torch.cuda.get_device_properties(device).multi_processor_count, clusters

        def launch(inputs, out):
            a, b = inputs
            plain = (a.dim() == b.dim() == 2 and a.shape[1] == b.shape[0] and out.is_contiguous()
                     and {a.dtype, b.dtype, out.dtype} == {torch.bfloat16} and a.is_cuda
                     and b.device == out.device == a.device
                     and tuple(out.shape) == (a.shape[0], b.shape[1]) and min(*a.shape, b.shape[1]) > 0)
            if not plain or not slow_stride(b.shape[1]):
                return stages(inputs, out)  # cu12's launch: no shape of this kernel's
            a, b = a.contiguous(), b.contiguous()  # before the alignment check: a copy starts aligned
            if not cl.is_aligned(a, b, out):
                return stages((a, b), out)
            (M, K), N = a.shape, b.shape[1]
            if a.device not in state:  # the GPU checked before its clusters are read from sm_90a code
                caps = cuda.require(a.device, ("tma", "clusters"))
                if caps.capability != (9, 0):
                    raise Unsupported(f"needs sm_90a (wgmma: compute capability 9.0 exactly), this GPU "
                                      f"({caps.name}) is {caps.capability[0]}.{caps.capability[1]}")
                state[a.device] = device_plan(a.device)
            at = (a.device, M, N, K)
            step = steps.get(at)
            if step is None:
                if len(steps) > 256:
                    steps.clear()
                step = steps[at] = plan_multicast(M, N, K, True, *state[a.device])
            if step.kernel != "mm_stages_mc":
                return stages((a, b), out)
            if "kernel" not in state:
                state["kernel"] = cl.OptIn(cl.load_sm90a(src, ("mm_stages_mc",))["mm_stages_mc"])
            key = (a.device, a.data_ptr(), b.data_ptr(), out.data_ptr(), M, N, K)
            if key not in maps:
                if len(maps) > 64:
                    maps.clear()
                maps[key] = torch.frombuffer(bytearray(cp.encode_maps(a, b, out)), dtype=torch.uint8).to(a.device)
            cuda.launch(state["kernel"], step.grid, step.block,
                        (cuda.ptr(maps[key]), numpy.int32(M), numpy.int32(N), numpy.int32(K)), shared_mem=step.smem)
            return out

        return launch

    return load


def refuses(shape) -> str:
    """Revision.refuses: a grid over the hardware limits, on either path; an empty C is returned as it is."""
    M, N, K = shape
    if not (M and N):
        return ""
    return cl.grid_problem(plan_multicast(M, N, K, True)) or cl.grid_problem(plan_multicast(M, N, K, False))
