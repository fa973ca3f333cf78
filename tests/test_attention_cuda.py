"""attention's CUDA C rungs, v4_wgmma and v5_persistent (kernels/attention/cuda/, the tile's work in
fa_wgmma.cuh), checked on the CPU: each compiles with nvcc for sm_90a only, exports exactly its
launcher's entry points, spills nothing and keeps its wgmma groups asynchronous (the overlap it is
built for); the launchers' shared memory, tile and box sizes match the source; the hashes follow
the includes; on the CPU and for what the kernels do not take they run v3_fma. GPU-marked tests
check the kernels against float64 (outputs and log-sum-exp, odd lengths, both head dims, more
tiles than blocks), v5 against v4 bit for bit, and the calls they must pass to v3_fma."""
import re
import shutil
from functools import lru_cache

import pytest
import torch

from kernels.attention import v3_fma, v4_wgmma, v5_persistent
from kernlog import cuda
from kernlog.identity import executed_files
from kernlog.registry import find_root, load_kernel

from .helpers import compile_report
from .helpers import ptxas_entries as entries

KERNEL = load_kernel(find_root(), "attention")
REV = KERNEL.revision("v4_wgmma")
REV5 = KERNEL.revision("v5_persistent")
HEADER = v4_wgmma.SOURCE.parent / "fa_wgmma.cuh"
RUNGS = {"v4_wgmma": v4_wgmma, "v5_persistent": v5_persistent}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) on the PATH")
gpu = pytest.mark.gpu
needs_sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="needs a compute capability 9.0 GPU (sm_90a)")


@lru_cache(maxsize=None)
def ptxas(rung: str = "v4_wgmma", arch: str = "sm_90a") -> str:
    return compile_report(RUNGS[rung].SOURCE, arch=arch)


def test_cuda_steps_after_v3_with_predictions():
    names = [r.name for r in KERNEL.revisions]
    for rev in (REV, REV5):
        assert rev.kind == "cuda" and rev.role == "step" and rev.change and rev.predicts
    assert names.index("v4_wgmma") == names.index("v3_fma") + 1
    assert names.index("v5_persistent") == names.index("v4_wgmma") + 1


@needs_nvcc
@pytest.mark.parametrize("rung", RUNGS)
def test_compiles_for_sm90a_and_exports_exactly_the_launchers_entries(rung):
    assert set(entries(ptxas(rung))) == set(RUNGS[rung].ENTRIES.values())


@needs_nvcc
@pytest.mark.parametrize("rung", RUNGS)
def test_needs_sm90a(rung):
    with pytest.raises(RuntimeError, match="wgmma|setmaxnreg"):
        cuda.compile_report(RUNGS[rung].SOURCE, arch="sm_90")


@needs_nvcc
@pytest.mark.parametrize("rung", RUNGS)
def test_wgmma_groups_stay_asynchronous_and_nothing_spills(rung):
    """ptxas serializes wgmma (a warning) when a register an in-flight product reads or writes is
    written before its wait: the softmax's P written over the P of the product in flight did, and
    v5's loading thread and consumers walking their tiles in one shared loop did."""
    report = ptxas(rung)
    assert "serialized" not in report, report
    for kernel, res in entries(report).items():
        assert "0 bytes spill stores" in res and "0 bytes stack frame" in res, (kernel, res)


def test_shared_memory_tiles_and_boxes_match_the_source():
    src = HEADER.read_text()
    for define, value in (("FA_BM", v4_wgmma.BLOCK_M), ("FA_BN", v4_wgmma.BLOCK_N), ("FA_STAGES", v4_wgmma.STAGES),
                          ("FA_THREADS", v4_wgmma.THREADS)):
        assert re.search(rf"#define {define} {value}\b", src), define
    # Q: BLOCK_M rows x D, each stage K and V of BLOCK_N x D, bf16; 1024 bytes of alignment slack;
    # a barrier for Q and three per stage
    assert v4_wgmma.smem_bytes(64) == 1024 + 128 * 64 * 2 + 3 * 2 * 128 * 64 * 2 + 10 * 8
    assert v4_wgmma.smem_bytes(128) <= 227 * 1024  # the opt-in ceiling of one block on sm_90
    assert "static constexpr int BYTES = 1024 + BAR_OFF + (QBARS + 3 * FA_STAGES) * 8;" in src
    # v4 has Q's full barrier, v5 its empty one too
    assert "FaAddr<D, 1>" in v4_wgmma.SOURCE.read_text() and "FaAddr<D, 2>" in v5_persistent.SOURCE.read_text()
    assert v5_persistent.smem_bytes(128) == v4_wgmma.smem_bytes(128) + 8 <= 227 * 1024
    # a TMA box row is 128 bytes (the swizzle's width): 64 bf16 columns; Q's box is a warpgroup's 64 rows
    assert v4_wgmma.Q_BOX == (64, 64) and v4_wgmma.KV_BOX == (64, v4_wgmma.BLOCK_N)


@pytest.mark.parametrize("rung", RUNGS)
def test_its_hash_follows_the_includes_and_the_launchers(rung):
    files = executed_files(KERNEL.revision(rung))
    for f in (RUNGS[rung].SOURCE, HEADER, v4_wgmma.SOURCE.parents[2] / "matmul_relu" / "cuda" / "mm_wgmma.cuh",
              cuda.COMMON_INCLUDE / "kl_cuda.cuh", v4_wgmma.SOURCE.parents[2] / "matmul_relu" / "cuda_launch.py",
              v4_wgmma.SOURCE.parents[1] / "v3_fma.py", v4_wgmma.SOURCE.parents[1] / "v4_wgmma.py",
              v4_wgmma.SOURCE.parents[1] / f"{rung}.py"):
        assert f.resolve() in files, f
    for f in (RUNGS[rung].SOURCE, HEADER):
        assert not re.search(r"#include\s*<", f.read_text())


@pytest.mark.parametrize("rung", RUNGS)
def test_the_cpu_runs_v3s_kernel(rung):
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn((1, 2, 40, 64), generator=gen) for _ in range(3))
    assert v4_wgmma.takes(q, k, v, torch.empty_like(q)) == "not on a GPU"
    picks = RUNGS[rung].candidates(q, k, v, torch.empty_like(q))
    assert v4_wgmma.WGMMA not in picks and v5_persistent.PERSISTENT not in picks
    got = RUNGS[rung].attention(q, k, v, 0.125, torch.full_like(q, float("nan")))
    want = v3_fma.attention(q, k, v, 0.125, torch.empty_like(q))
    assert torch.equal(got, want)


@pytest.mark.parametrize("rung, config", [("v4_wgmma", v4_wgmma.WGMMA), ("v5_persistent", v5_persistent.PERSISTENT)])
def test_the_cuda_kernel_asked_for_where_it_cannot_run_is_an_error(rung, config):
    q = torch.zeros((1, 1, 8, 64))
    with pytest.raises(ValueError, match=f"attention {rung}: the CUDA C kernel cannot run this call: not on a GPU"):
        RUNGS[rung].attention(q, q, q, 0.125, torch.empty_like(q), config=config)


def test_v5_offers_its_kernel_then_v4s_candidates(monkeypatch):
    """On tensors the kernels take, v5's picker times its own kernel in each tile order that makes
    another group at the shape, each with both of O's stores, then v4's kernel and v3's loops, so
    it can keep the rung before it wherever that is faster."""
    monkeypatch.setattr(v4_wgmma, "takes", lambda *a: "")
    monkeypatch.setattr(v5_persistent, "_sms", lambda index: 132)
    q = torch.empty((4, 32, 2048, 128), dtype=torch.bfloat16)  # 128 heads of 16 tiles: groups 128, 8, 1
    got = v5_persistent.candidates(q, q, q, q)
    mine = [o + s for o in v5_persistent.ORDERS for s in ("", v5_persistent.WIDE_O)]
    assert got == [*mine, v4_wgmma.WGMMA, *v3_fma.candidates("bf16", 128)]
    assert len(set(map(str, got))) == len(got)
    q = torch.empty((1, 2, 256, 64), dtype=torch.bfloat16)  # 2 heads: a round holds both
    p, h, w = v5_persistent.PERSISTENT, v5_persistent.BY_HEAD, v5_persistent.WIDE_O
    assert v5_persistent.candidates(q, q, q, q)[:5] == [p, p + w, h, h + w, v4_wgmma.WGMMA]


def test_v5s_configs_name_an_order_and_a_store_and_nothing_else():
    """Each config the picker may store names its order and O's store back; v4's configs, and any
    other name, are not v5's (they go to v4_wgmma)."""
    for order in v5_persistent.ORDERS:
        assert v5_persistent.parsed(order) == (order, False)
        assert v5_persistent.parsed(order + v5_persistent.WIDE_O) == (order, True)
    for other in (v4_wgmma.WGMMA, *v3_fma.candidates("bf16", 64), "diagonal", None):
        assert v5_persistent.parsed(other) is None


def test_v5s_wide_o_store_launches_its_own_entries(monkeypatch):
    """O's store picks the entry: fp_fwd_d<D>_wide_o where the config says 16-byte vectors, the
    plain entry otherwise (the launcher would time one kernel twice under two names otherwise)."""
    import kernels.matmul_relu.cuda_launch as cl

    loaded = {}
    monkeypatch.setattr(v5_persistent, "_KERNELS", {})
    monkeypatch.setattr(cl, "load_sm90a", lambda src, names: loaded.setdefault("names", {n: n for n in names}))
    monkeypatch.setattr(cl, "OptIn", lambda f: f)
    for d in (64, 128):
        assert v5_persistent._kernel(d) == f"fp_fwd_d{d}"
        assert v5_persistent._kernel(d, True) == f"fp_fwd_d{d}_wide_o"


def test_a_v5_config_launches_its_order_s_group_and_its_store_s_entry(monkeypatch):
    """attention(config=...) with one of v5's configs launches the entry of that store and passes
    that order's group: the store and the order each reach the kernel, not just its name."""
    import numpy

    from kernlog import cuda as kcuda

    launched = []
    monkeypatch.setattr(v4_wgmma, "takes", lambda *a: "")
    monkeypatch.setattr(v4_wgmma, "tensor_maps", lambda *a: None)
    monkeypatch.setattr(kcuda, "ptr", lambda x: numpy.uint64(0))
    monkeypatch.setattr(v5_persistent, "_sms", lambda index: 132)
    monkeypatch.setattr(v5_persistent, "_kernel", lambda d, wide_o=False: (d, wide_o))
    monkeypatch.setattr(kcuda, "launch", lambda kernel, grid, block, args, shared_mem: launched.append((kernel, args)))
    q = torch.zeros((16, 16, 512, 128), dtype=torch.bfloat16)
    for order in v5_persistent.ORDERS:
        for store, wide in (("", False), (v5_persistent.WIDE_O, True)):
            launched.clear()
            v5_persistent.attention(q, q, q, 0.1, q, config=order + store)
            (kernel, args), = launched
            assert kernel == (128, wide) and int(args[5]) == v5_persistent.group(order, q.shape, 132)


@pytest.mark.parametrize("shape, groups", [
    ((16, 16, 512, 128), (256, 33, 1)),  # 4 tiles a head: 33 heads make a round of 132 blocks
    ((1, 16, 8192, 128), (16, 2, 1)),  # 64 tiles a head
    ((1, 8, 16384, 128), (8, 1, 1)),  # a head's 128 tiles are about a round
    ((1, 12, 1024, 64), (12, 12, 1)),  # 96 tiles, fewer than the blocks: a round holds every head
    ((1, 1, 129, 64), (1, 1, 1)),
])
def test_v5s_tile_orders_group_all_heads_a_rounds_or_one(shape, groups):
    got = tuple(v5_persistent.group(order, shape, 132) for order in v5_persistent.ORDERS)
    assert got == groups
    with pytest.raises(ValueError, match="no tile order 'diagonal'"):
        v5_persistent.group("diagonal", shape, 132)


def test_v5s_kernel_takes_the_group_it_is_launched_with():
    """The launcher passes the order's group between BH and scale2, as the kernel's signature
    has it: an argument out of place is read as another type without an error."""
    src = v5_persistent.SOURCE.read_text()
    for d in (64, 128):
        assert re.search(rf"fp_fwd_d{d}\(const unsigned long long\* __restrict__ tmaps, bf16_t\* __restrict__ O, "
                         rf"float\* __restrict__ lse, int T,\s+int BH, int group, float scale2\)", src), d
    launcher = v5_persistent.SOURCE.parents[1].joinpath("v5_persistent.py").read_text()
    assert "numpy.int32(T), numpy.int32(B * H),\n            numpy.int32(group(order," in launcher


def test_v5s_grid_is_the_sms_or_the_tiles(monkeypatch):
    monkeypatch.setattr(v5_persistent, "_sms", lambda index: 132)
    assert v5_persistent.grid(torch.zeros((32, 16, 256, 64))) == 132  # 1024 tiles
    assert v5_persistent.grid(torch.zeros((1, 12, 1024, 64))) == 96  # 8 x 12 tiles
    assert v5_persistent.grid(torch.zeros((1, 1, 129, 64))) == 2


def _reference(q, k, v, scale):
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True,
                                                            scale=scale)


@gpu
@needs_sm90
@pytest.mark.parametrize("shape", [(1, 1, 17, 64), (2, 3, 256, 64), (1, 2, 300, 64), (1, 1, 200, 128),
                                   (2, 2, 1000, 128), (1, 4, 2048, 128), (3, 1, 129, 64)])
@pytest.mark.parametrize("rung, config", [("v4_wgmma", v4_wgmma.WGMMA), ("v5_persistent", v5_persistent.PERSISTENT)])
def test_the_cuda_kernel_against_float64_on_gpu(shape, rung, config):
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    q, k, v = (torch.randn(shape, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(3))
    scale = shape[-1] ** -0.5
    out = torch.full_like(q, float("nan"))
    lse = torch.full(shape[:3], float("nan"), device="cuda")
    RUNGS[rung].attention(q, k, v, scale, out, config=config, lse=lse)
    want = _reference(q, k, v, scale)
    assert (out.double() - want).abs().max().item() < 3e-2
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(torch.ones(shape[2], shape[2], dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    assert (lse.double() - torch.logsumexp(s, -1)).abs().max().item() < 1e-3


@gpu
@needs_sm90
def test_what_the_kernel_does_not_take_runs_v3_on_gpu():
    q32 = torch.randn((1, 2, 64, 64), device="cuda")
    assert v4_wgmma.takes(q32, q32, q32, torch.empty_like(q32)) == "bf16 only"
    wide = torch.randn((1, 2, 64, 2, 64), device="cuda", dtype=torch.bfloat16)[:, :, :, 0]  # strided rows
    assert "contiguous" in v4_wgmma.takes(wide, wide, wide, torch.empty_like(wide))
    out = torch.full_like(wide, float("nan"))
    v4_wgmma.attention(wide, wide, wide, 0.125, out)
    assert (out.double() - _reference(wide, wide, wide, 0.125)).abs().max().item() < 3e-2


@gpu
@needs_sm90
@pytest.mark.parametrize("shape", [(8, 32, 256, 64), (2, 8, 2048, 128), (3, 5, 129, 128), (1, 1, 40, 64),
                                   (7, 5, 600, 64)])
@pytest.mark.parametrize("order", [o + s for o in v5_persistent.ORDERS for s in v5_persistent.STORES])
def test_v5_is_v4_bit_for_bit_with_more_tiles_than_blocks_on_gpu(shape, order):
    """v5 runs v4's tile code: where each block takes many tiles (the ring's parities carried
    across tiles, Q released and reloaded), in every tile order (groups of all heads, of a
    round's, of one; 35 heads of 5 tiles make a last group of fewer heads) and with either of O's
    stores (16-byte vectors after the quad's transpose; 129 and 600 tokens end in a partial
    tile), its output and log-sum-exp are v4's exactly: no tile skipped or taken twice, no
    column moved."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(shape, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(3))
    got = {}
    for rung, config in (("v4_wgmma", v4_wgmma.WGMMA), ("v5_persistent", order)):
        out, lse = torch.full_like(q, float("nan")), torch.full(shape[:3], float("nan"), device="cuda")
        RUNGS[rung].attention(q, k, v, shape[-1] ** -0.5, out, config=config, lse=lse)
        got[rung] = (out, lse)
    assert not got["v5_persistent"][0].isnan().any()
    assert torch.equal(got["v4_wgmma"][0], got["v5_persistent"][0])
    assert torch.equal(got["v4_wgmma"][1], got["v5_persistent"][1])
