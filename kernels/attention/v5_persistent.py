"""v5_persistent: v4_wgmma's CUDA C kernel run persistently, a block per SM, picked per shape.

Change: v4's profile at (1, 12, 1024, 64) shows 96 blocks on 132 SMs, and at 256-1024 tokens a
block per query tile spends much of its life loading its first tiles: there v4's picker ran
v3_fma's Triton loop. cuda/v5_persistent.cu launches one block per SM (fewer where the tiles
are fewer), each taking query tiles longest first, dealt in rounds that alternate direction; the
order runs over all heads at once, over groups of about a round's heads, or head by head (the
picker times each: over all heads, a short sequence's head has its tiles in rounds far apart, and
its K and V may leave L2 between them). Its K/V ring runs on across tiles and Q is released
after a tile's last S product, so the loading warp fetches the next tile's Q and key blocks while
the consumers finish this tile's last P V and store its O, either as v4 does (4 bytes a thread)
or in 16-byte vectors after a transpose inside each quad (its first profile at 16x16x512x128
counted half of its store sectors as excess). The tile's work is v4's, in the same code
(cuda/fa_wgmma.cuh), so outputs are v4's bit for bit. The picker times it in each order and store
beside v4's kernel and v3_fma's loops at each shape; fp32, other head dims, other GPUs and the
CPU run v3_fma, as in v4.
Predicts: >= v4_wgmma on every family member within noise, and >= v3_fma's loop at the short and
GPT-2 members, where v4's picker kept that loop.
"""
from __future__ import annotations

import functools
from pathlib import Path

from kernels.common import tuning

from . import v1_flash, v3_fma, v4_wgmma

SOURCE = Path(__file__).resolve().parent / "cuda" / "v5_persistent.cu"
ENTRIES = {(64, False): "fp_fwd_d64", (128, False): "fp_fwd_d128",  # (head dim, O in 16-byte vectors)
           (64, True): "fp_fwd_d64_wide_o", (128, True): "fp_fwd_d128_wide_o"}
# The picker's candidates for this kernel, beside v4's and v3_fma's: the same kernel with its tiles
# in three orders (cuda/v5_persistent.cu's `group`, the heads whose tiles are ordered together).
PERSISTENT = "persistent"  # every head's tiles in one order, longest first
BY_ROUND = "persistent, a round's heads"  # heads in groups of about a round's tiles (one per block)
BY_HEAD = "persistent, head by head"  # one head's tiles at a time, longest first
ORDERS = (PERSISTENT, BY_ROUND, BY_HEAD)
# ... each with O stored as v4 stores it (4 bytes a thread, a quad's 16 contiguous bytes of a row),
# or transposed inside the quad first so each thread stores 16 bytes (fa_wgmma.cuh's WIDE_O).
WIDE_O = ", O in 16-byte vectors"
STORES = ("", WIDE_O)
QBARS = 2  # Q's full and empty barriers (v4: its full one)


def smem_bytes(head_dim: int) -> int:
    """v5_persistent.cu's FaSmem<D, 2>::BYTES: v4's with Q's empty barrier."""
    return v4_wgmma.smem_bytes(head_dim) + 8 * (QBARS - 1)


_KERNELS: dict = {}


def _kernel(head_dim: int, wide_o: bool = False):
    if not _KERNELS:
        from kernels.matmul_relu.cuda_launch import OptIn, load_sm90a

        _KERNELS.update({d: OptIn(f) for d, f in zip(ENTRIES, load_sm90a(SOURCE, tuple(ENTRIES.values())).values(),
                                                     strict=True)})
    return _KERNELS[head_dim, wide_o]


@functools.lru_cache(maxsize=None)
def _sms(index) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def grid(q) -> int:
    """Blocks launched: one per SM, or one per query tile where the tiles are fewer."""
    B, H, T, _ = q.shape
    return min(_sms(q.device.index), -(-T // v4_wgmma.BLOCK_M) * B * H)


def group(order: str, shape, sms: int) -> int:
    """The heads a group of the tiles' order holds (cuda/v5_persistent.cu's `group`): all of them;
    as many as make about one round of tiles on `sms` blocks (each head has a tile per 128 queries),
    so a round reads those heads' K and V while they are in L2; or one."""
    B, H, T, _ = shape
    if order == PERSISTENT:
        return B * H
    if order == BY_ROUND:
        return min(B * H, max(1, sms // -(-T // v4_wgmma.BLOCK_M)))
    if order == BY_HEAD:
        return 1
    raise ValueError(f"attention v5_persistent: no tile order {order!r}; one of {ORDERS}")


def orders(shape, sms: int) -> list:
    """ORDERS, each once per group it makes at this shape (the first order that makes it)."""
    seen: dict = {}
    for order in ORDERS:
        seen.setdefault(group(order, shape, sms), order)
    return list(seen.values())


def configs(shape, sms: int) -> list:
    """This kernel's candidates at `shape`: each of `orders`, with each of STORES."""
    return [order + store for order in orders(shape, sms) for store in STORES]


def parsed(config) -> tuple | None:
    """(order, O in 16-byte vectors) of one of this kernel's configs; None for any other config."""
    for order in ORDERS:
        for store in STORES:
            if config == order + store:
                return order, store == WIDE_O
    return None


def launch_persistent(q, k, v, scale, out, lse=None, order=PERSISTENT, wide_o=False):
    """The persistent kernel, its tiles in `order`, O stored in 16-byte vectors where `wide_o`, on
    (B, H, T, D) bf16 tensors that v4_wgmma.takes accepts."""
    import numpy

    from kernlog import cuda

    B, H, T, D = q.shape
    args = (cuda.ptr(v4_wgmma.tensor_maps(q, k, v)), cuda.ptr(out),
            numpy.uint64(0 if lse is None else lse.data_ptr()), numpy.int32(T), numpy.int32(B * H),
            numpy.int32(group(order, q.shape, _sms(q.device.index))), numpy.float32(scale * v4_wgmma.LOG2E))
    cuda.launch(_kernel(D, wide_o), (grid(q), 1, 1), (v4_wgmma.THREADS, 1, 1), args, shared_mem=smem_bytes(D))
    return out


def candidates(q, k, v, out) -> list:
    """This kernel in its tile orders and O's stores where it runs (`configs`), then v4_wgmma's
    candidates (its kernel, v3_fma's loops)."""
    mine = [] if v4_wgmma.takes(q, k, v, out) else configs(q.shape, _sms(q.device.index))
    return mine + v4_wgmma.candidates(q, k, v, out)


def attention(q, k, v, scale, out, config=None, lse=None):
    """v1_flash.attention's contract; `config`: one of this kernel's (`configs`), or what
    v4_wgmma.attention takes, skips the pick."""
    v1_flash.check_args(q, k, v, out)
    mine = parsed(config)
    if mine is not None:
        why = v4_wgmma.takes(q, k, v, out)
        if why:
            raise ValueError(f"attention v5_persistent: the CUDA C kernel cannot run this call: {why}")
        return launch_persistent(q, k, v, scale, out, lse, *mine)
    if config is not None or not out.is_cuda:
        return v4_wgmma.attention(q, k, v, scale, out, config, lse)  # WGMMA or a v3_fma layout
    B, H, T, D = q.shape

    def run(pick):
        mine = parsed(pick)
        if mine is None:
            v4_wgmma.launch_pick(pick, q, k, v, scale, out, lse)
        elif v4_wgmma.takes(q, k, v, out):  # picked for this shape on tensors it could take; these it cannot
            v3_fma.attention(q, k, v, scale, out, None, lse)
        else:
            launch_persistent(q, k, v, scale, out, lse, *mine)

    tuning.launch_fastest(("attention.v5_persistent", B, H, T, D, q.dtype), lambda: candidates(q, k, v, out), run,
                          q.device)
    return out
