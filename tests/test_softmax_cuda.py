"""The CUDA C softmax ladder: every file compiles for sm_90 (the ones that need no clusters
for sm_80 too), the tuned one without spills, and the launch plans name exactly the kernels
the files export; a GPU without clusters skips v5-v7 with one line. CPU-only except the
GPU-marked tests, which gate extra shapes and a misaligned base pointer on the device."""
import re
import shutil
import subprocess
import sys
from functools import lru_cache

import pytest
import torch

from kernels.softmax import cuda_launch
from kernlog import cuda
from kernlog.errors import Unsupported
from kernlog.identity import executed_files
from kernlog.registry import find_root, load_kernel
from kernlog.run import gate

from .helpers import A100, H100, compile_report, fake_gpu
from .helpers import ptxas_entries as entries

KERNEL = load_kernel(find_root(), "softmax")
CUDA_REVS = [r for r in KERNEL.revisions if r.kind == "cuda"]
# One row length per v5 kernel (and v4 path): with the gate's strided case (misaligned
# stride) they reach every entry point of both files; the GPU test gates them all.
PATH_SHAPES = ((3, 256), (3, 512), (3, 1000), (3, 2048), (3, 4096), (3, 8192), (3, 16384), (3, 32000),
               (3, 65536), (3, 131072), (3, 131080))
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@lru_cache(maxsize=None)
def report(name: str, arch: str = "sm_90") -> str:
    return compile_report(KERNEL.revision(name).sources[0], arch=arch)


@needs_nvcc
@pytest.mark.parametrize("rev", [r.name for r in CUDA_REVS])
def test_compiles_and_exports_exactly_the_planned_kernels(rev):
    _, names = cuda_launch.PLANS[rev]
    assert set(entries(report(rev))) == set(names)


# v11's bf16 peeled meeting: ptxas spills two words once a chunk at 64 registers, however the chunk
# holds its scalar and the epoch (tried in registers, in shared memory, loaded first or last: 4-12 bytes)
TWO_WORDS_SPILLED = re.compile(r"softmax_bf16_meet_peeled_t\d+$")


@needs_nvcc
@pytest.mark.parametrize("rev", ["v4_vectorized", "v5_tuned", "v6_autotuned", "v7_bf16_packed", "v8_split",
                                 "v9_peeled", "v10_meet", "v11_meet_peeled"])
def test_register_resident_revisions_do_not_spill(rev):
    found = entries(report(rev))
    for name, resources in found.items():
        spilled = "8" if TWO_WORDS_SPILLED.match(name) else "0"
        assert f"{spilled} bytes spill stores" in resources and f"{spilled} bytes spill loads" in resources, \
            (name, resources)
        regs = int(re.search(r"Used (\d+) registers", resources).group(1))
        if rev != "v4_vectorized" and not re.search(r"_group_|_split_", name):  # 1024 threads per SM
            assert regs <= 64, (name, regs)


def test_sources_need_no_headers_nvrtc_may_lack():
    source_dir = KERNEL.revisions[0].sources[0].parent
    allowed = {cuda.COMMON_INCLUDE / "kl_cuda.cuh"} | set(source_dir.glob("*.cu"))
    for rev in CUDA_REVS:
        text = rev.sources[0].read_text()
        assert not re.search(r"#include\s*<", text), f"{rev.name}: a system header NVRTC may lack"
        included = cuda.includes(rev.sources[0])
        assert included and set(included) <= allowed, rev.name
        assert set(included) <= set(executed_files(rev)), f"{rev.name}: an include is not in its hash"


def _cluster_code(rev) -> bool:
    return any(re.search(r"__cluster_dims__|%cluster_|barrier\.cluster", p.read_text())
               for p in (rev.sources[0], *cuda.includes(rev.sources[0])))


@pytest.mark.parametrize("rev", CUDA_REVS, ids=lambda r: r.name)
def test_revisions_with_cluster_code_declare_they_need_clusters(rev):
    assert _cluster_code(rev) == ("clusters" in cuda_launch.NEEDS.get(rev.name, ()))


@needs_nvcc
@pytest.mark.parametrize("rev", [r.name for r in CUDA_REVS if r.name not in cuda_launch.NEEDS])
def test_revisions_that_need_nothing_compile_for_sm80(rev):
    _, names = cuda_launch.PLANS[rev]
    assert set(entries(report(rev, "sm_80"))) == set(names)


class Compiled:
    """kernlog.cuda's compile and launch, recorded instead of done: the launcher runs on the CPU."""

    def __init__(self, monkeypatch):
        self.compiled, self.launched = [], []
        monkeypatch.setattr(cuda, "load_module", lambda source, names: self.compiled.append(source) or
                            {n: n for n in names})
        monkeypatch.setattr(cuda, "launch", lambda kernel, grid, block, args: self.launched.append(
            (kernel, grid[0], block[0])))


@pytest.mark.parametrize("rev", ["v5_tuned", "v6_autotuned", "v7_bf16_packed", "v8_split"])
def test_gpu_without_clusters_skips_before_compiling(rev, monkeypatch):
    fake_gpu(monkeypatch, A100)
    done = Compiled(monkeypatch)
    x = torch.randn(4, 32768)
    with pytest.raises(Unsupported) as exc:
        KERNEL.revision(rev).load()((x,), torch.empty_like(x))
    assert str(exc.value) == ("needs thread-block clusters (compute capability 9.0), "
                              "this GPU (NVIDIA A100-SXM4-80GB) is 8.0")
    assert not done.compiled and not done.launched


@pytest.mark.parametrize("caps", [A100, H100], ids=["a100", "h100"])
def test_revisions_that_need_nothing_launch_anywhere(caps, monkeypatch):
    fake_gpu(monkeypatch, caps)
    done = Compiled(monkeypatch)
    x = torch.randn(4, 4096)
    KERNEL.revision("v4_vectorized").load()((x,), torch.empty_like(x))
    assert done.launched == [("softmax_fp32_regs4", 4, 256)] and len(done.compiled) == 1


def test_cluster_rows_launch_on_a_gpu_with_clusters(monkeypatch):
    fake_gpu(monkeypatch, H100)
    done = Compiled(monkeypatch)
    x = torch.randn(3, 32000)
    KERNEL.revision("v5_tuned").load()((x,), torch.empty_like(x))
    assert done.launched == [("softmax_fp32_row_vec_t256_c4", 12, 256)]


def _aligned(shape, dtype, case):
    cols = shape[1]
    stride = cols + 3 if case == "strided" else cols
    vw = cuda_launch.vector_width(dtype)
    return cols % vw == 0 and stride % vw == 0


@pytest.mark.parametrize("rev", [r.name for r in CUDA_REVS])
def test_plans_cover_the_row_and_every_kernel_is_gated(rev):
    plan, names = cuda_launch.PLANS[rev]
    used = set()
    for shape in KERNEL.gate_shapes + PATH_SHAPES + KERNEL.bench_shapes:
        for dtype in KERNEL.dtypes:
            for case in KERNEL.cases:
                steps = plan(*shape, dtype, _aligned(shape, dtype, case))
                for step in steps if isinstance(steps, list) else [steps]:
                    assert step.kernel in names and step.grid >= 1 and step.block % 32 == 0
                    assert step.capacity == 0 or step.capacity >= shape[1]
                    assert not step.then or step.then in names
                    if shape not in KERNEL.bench_shapes:
                        used |= {step.kernel, step.then} - {""}
    assert used == set(names), f"kernels no gated shape reaches: {set(names) - used}"


def test_tuned_plan_keeps_bench_shapes_on_chip_with_16_byte_accesses():
    for rows, cols in KERNEL.bench_shapes:
        for dtype in KERNEL.dtypes:
            step = cuda_launch.plan_v5(rows, cols, dtype, True)
            assert "_vec" in step.kernel and step.capacity >= cols, (rows, cols, dtype, step)
            cluster = int(step.kernel.rsplit("_c", 1)[1]) if "_row_" in step.kernel else 1
            assert step.grid % cluster == 0 and step.grid >= rows // cuda_launch.WARP_ROWS


def test_import_and_load_compile_nothing():
    code = ("import sys; from kernlog.registry import find_root, load_kernel; "
            "k = load_kernel(find_root(), 'softmax'); [r.load() for r in k.revisions if r.kind == 'cuda']; "
            "from kernels.softmax import cuda_launch, softmax_triton; "
            "from kernlog import cuda; assert 'cupy' not in sys.modules and not cuda._MODULES")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=find_root())
    assert done.returncode == 0 and not done.stdout, done.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("rev", ["v4_vectorized", "v5_tuned", "v6_autotuned", "v7_bf16_packed", "v8_split",
                                 "v10_meet", "v11_meet_peeled"])
def test_every_path_passes_the_gate_on_gpu(rev):
    results = gate.check_revision(KERNEL, KERNEL.revision(rev), "cuda", shapes=PATH_SHAPES)
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)


@pytest.mark.gpu
@pytest.mark.parametrize("rev", ["v4_vectorized", "v5_tuned", "v6_autotuned", "v7_bf16_packed", "v8_split"])
def test_misaligned_base_pointers_take_the_scalar_path(rev):
    """x and out start 2 elements past a 16-byte boundary; cols and the row stride are aligned."""
    launch = KERNEL.revision(rev).load()

    def shifted(inputs, out):
        (x,) = inputs
        rows, cols = x.shape
        xb = torch.empty((rows, cols + 8), dtype=x.dtype, device=x.device)
        xs = xb[:, 2:2 + cols]
        xs.copy_(x)
        ob = torch.full((rows * cols + 2,), float("nan"), dtype=x.dtype, device=x.device)
        os_ = ob[2:].view(rows, cols)
        assert not cuda_launch.is_aligned(xs, os_)
        launch((xs,), os_)
        out.copy_(os_)
        return out

    results = gate.check_revision(KERNEL, KERNEL.revision(rev), "cuda", shapes=((5, 4096), (3, 32768)),
                                  launch=shifted)
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)


@pytest.mark.gpu
@pytest.mark.parametrize("rev", ["v6_autotuned", "v7_bf16_packed", "v8_split"])
def test_every_timed_candidate_passes_the_gate_on_gpu(rev, monkeypatch):
    """The gate sees only the layout the launcher settles on; here each candidate is forced in turn
    (on the misaligned strided case, with fewer candidates, the last one stands in for the rest)."""
    source = KERNEL.revision(rev).sources[0]
    real_plan, names = cuda_launch.PLANS[rev]
    failed = []
    for shape in ((3, 1000), (5, 4096), (3, 16384), (3, 32000), (2, 65536), (2, 131072), (2, 262144)):
        for dtype in KERNEL.dtypes:
            for i in range(len(real_plan(*shape, dtype, True))):
                pick = lambda *k, i=i: [(c := real_plan(*k))[min(i, len(c) - 1)]]  # noqa: E731
                monkeypatch.setitem(cuda_launch.PLANS, rev, (pick, names))
                launch = cuda_launch.loader(source, rev)()
                results = gate.check_revision(KERNEL, KERNEL.revision(rev), "cuda", shapes=(shape,),
                                              dtypes=(dtype,), launch=launch)
                failed += [f"{dtype} candidate {i}: {r.line()}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)


def test_v9_peels_only_rows_whose_output_sits_at_the_input_s_offset():
    """A contiguous bf16 tensor of odd rows is not aligned but coaligned (each row of x and out at
    the same offset from 16 bytes): the peeled layouts may run. A strided x (rows 3 longer than
    the output's) is not: v8's candidates alone, or a uint4 store would land off its boundary."""
    from kernels.softmax import peel_launch

    x = torch.empty((4, 50257), dtype=torch.bfloat16)
    out = torch.empty_like(x)
    assert not cuda_launch.is_aligned(x, out) and peel_launch.coaligned(x, out)
    wide = torch.empty((4, 50260), dtype=torch.bfloat16)[:, :50257]
    assert not peel_launch.coaligned(wide, out)
    assert peel_launch.coaligned(torch.empty((4, 50265), dtype=torch.bfloat16)[:, :50257], out)  # 8 longer
    assert not peel_launch.coaligned(torch.empty(4 * 50257 + 1, dtype=torch.bfloat16)[1:].view(4, 50257), out)
    plan = peel_launch.plan_v9(4096, 50257, "bf16", False)
    assert {s.kernel for s in plan} >= {"softmax_bf16_peeled_t1024_c1", "softmax_bf16_peeled_t512_c2"}
    assert {s.kernel for s in peel_launch.plan_v9(4096, 50257, "fp32", False)} >= {"softmax_fp32_peeled_t512_c4"}
    assert all(s.capacity >= 50257 for s in plan)
    assert all("_peeled_" not in s.kernel for s in peel_launch.plan_v9(4096, 50264, "bf16", True))


def _gate_each_forced(monkeypatch, module, plan_name, rev_name, shapes, dtype, aligned, marker):
    """Gate `rev_name` at each shape with each of its plan's candidates whose kernel holds `marker`
    forced first in turn (module.plan_name swapped; every shape must have one); the failures' lines
    and how many were forced."""
    from kernels.common import tuning

    rev = KERNEL.revision(rev_name)
    real_plan = getattr(module, plan_name)
    monkeypatch.setattr(tuning, "fastest", lambda run, candidates, device: candidates[0])
    failed, forced = [], 0
    for shape in shapes:
        cands = [s for s in real_plan(*shape, dtype, aligned) if marker in s.kernel]
        assert cands, (rev_name, shape, dtype)  # a shape that reaches none of them tests nothing
        for cand in cands:
            monkeypatch.setattr(module, plan_name, lambda *k, c=cand: [c] + [s for s in real_plan(*k) if s != c])
            monkeypatch.setattr(tuning, "PICKED", {})
            results = gate.check_revision(KERNEL, rev, "cuda", shapes=(shape,), dtypes=(dtype,), launch=rev.load())
            failed += [f"{cand.kernel} {shape}: {r.line()}" for r in results if not r.ok]
            forced += 1
    return failed, forced


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_every_peeled_candidate_passes_the_gate_on_gpu(monkeypatch, dtype):
    """v9's peeled layouts, each forced in turn, on odd and offset rows (heads and tails of
    every length across the rows), every gate case: the strided one falls back to v8's."""
    from kernels.softmax import peel_launch

    shapes = ((9, 1025), (8, 4097), (9, 12345), (5, 50257), (3, 65535), (2, 131071))
    failed, forced = _gate_each_forced(monkeypatch, peel_launch, "plan_v9", "v9_peeled", shapes, dtype, False,
                                       "_peeled_")
    assert forced >= len(shapes) and not failed, "\n".join(failed)


def test_v10_meets_only_aligned_rows_past_a_block_in_2_to_32_chunks():
    from kernels.softmax import meet_launch

    def meets(*key):
        steps = meet_launch.plan_v10(*key)
        return {s.kernel: s for s in (steps if isinstance(steps, list) else [steps]) if "_meet_" in s.kernel}

    found = meets(4096, 151936, "fp32", True)
    assert set(found) == {"softmax_fp32_meet_t256", "softmax_fp32_meet_t512", "softmax_fp32_meet_t1024"}
    assert found["softmax_fp32_meet_t1024"].grid == 4096 * 5 and found["softmax_fp32_meet_t256"].grid == 4096 * 19
    assert all(s.capacity >= 151936 and s.block == int(k.rsplit("_t", 1)[1]) for k, s in found.items())
    # a million columns: 1024 threads x 32 elements in 32 chunks; bf16 packed (64 a thread): 512 x 64 in
    # 32 or 1024 x 64 in 16
    assert {k: s.grid for k, s in meets(16, 1048576, "bf16", True).items()} == {
        "softmax_bf16_meet_t1024": 16 * 32, "softmax_bf16_meet_packed_t512": 16 * 32,
        "softmax_bf16_meet_packed_t1024": 16 * 16}
    assert not any("packed" in k for k in meets(16, 1048576, "fp32", True))
    # 16392: 3 chunks of 256 x 32 (the last of 8 elements), 2 of 512 x 32, 1 of 1024 x 32 (no split)
    assert {k: s.grid for k, s in meets(2, 16392, "fp32", True).items()} == {"softmax_fp32_meet_t256": 6,
                                                                            "softmax_fp32_meet_t512": 4}
    for key in ((4096, 151936, "fp32", False), (8, 16384, "bf16", True), (4, 2 * 1048576, "fp32", True)):
        assert not meets(*key), key  # not 16-byte rows; one block holds it; more than 32 chunks
    # v9's candidates stay, in v9's order, ahead of the meeting ones
    from kernels.softmax import peel_launch
    v9 = peel_launch.plan_v9(64, 262144, "fp32", True)
    # Launch as meet_launch imported it: a test before may have reloaded the kernels package
    launch = meet_launch.cl.Launch
    assert meet_launch.plan_v10(64, 262144, "fp32", True) == v9 + [
        launch(f"softmax_fp32_meet_t{t}", 64 * n, t, 262144) for t, n in ((256, 32), (512, 16), (1024, 8))]


MEET_SHAPES = ((3, 16392), (3, 32000), (2, 65536), (2, 131072), (3, 151936), (1, 262144), (2, 1048576))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_every_meeting_candidate_passes_the_gate_on_gpu(monkeypatch, dtype):
    """v10's meeting layouts, each forced in turn (the strided case falls back to v9's)."""
    from kernels.softmax import meet_launch

    failed, forced = _gate_each_forced(monkeypatch, meet_launch, "plan_v10", "v10_meet", MEET_SHAPES, dtype, True,
                                       "_meet_")
    assert forced >= 2 * len(MEET_SHAPES) and not failed, "\n".join(failed)


def _launched_at_each_polls(monkeypatch, module, plan_name, source, x, cand):
    """x's outputs with only `cand` planned (module.plan_name swapped), three launches (the epoch
    flips each) at each of the meeting's polls, 0 (every block finds its row itself), 1 (some do)
    and the meeting's again: twelve outputs, the first the meeting's."""
    from kernels.common import tuning
    from kernels.softmax import meet_launch

    monkeypatch.setattr(module, plan_name, lambda *k, c=cand: [c])
    outs = []
    for polls in (meet_launch.GPU_POLLS, 0, 1, meet_launch.GPU_POLLS):
        monkeypatch.setattr(tuning, "PICKED", {})
        launch = module.loader(source, polls)()
        for _ in range(3):  # the epoch flips each launch
            out = torch.full_like(x, float("nan"))
            launch((x,), out)
            outs.append(out)
    return outs


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_a_block_that_stops_polling_finds_the_row_bitwise_as_the_meeting_does(monkeypatch, dtype):
    """polls=0: every block computes its row's (max, sum) from x; polls=1: some meet, some do not.
    Each agrees bit for bit with the meeting (the revision claims determinism), on every candidate,
    and across launches that flip the epoch."""
    from kernels.common import tuning
    from kernels.softmax import meet_launch

    source = KERNEL.revision("v10_meet").sources[0]
    real_plan = meet_launch.plan_v10
    monkeypatch.setattr(tuning, "fastest", lambda run, candidates, device: candidates[0])
    gen = torch.Generator(device="cuda").manual_seed(20)
    for shape in ((3, 32000), (5, 151936), (2, 1048576)):
        (x,) = KERNEL.make_inputs(shape, dtype, gen, "cuda", "random")
        x = x.contiguous()
        for cand in [s for s in real_plan(*shape, dtype, True) if "_meet_" in s.kernel]:
            outs = _launched_at_each_polls(monkeypatch, meet_launch, "plan_v10", source, x, cand)
            ref = torch.softmax(x.double(), dim=-1)
            assert (outs[0].double() - ref).abs().max().item() < (2e-2 if dtype == "bf16" else 1e-5), cand
            for i, out in enumerate(outs[1:], 1):
                assert torch.equal(out, outs[0]), (shape, cand.kernel, i)


def test_v11_meets_rows_at_any_offset_in_2_to_32_chunks_that_hold_every_offset_s_body():
    from kernels.softmax import meet_launch, meet_peeled_launch

    def meets(*key):
        steps = meet_peeled_launch.plan_v11(*key)
        return {s.kernel: s for s in (steps if isinstance(steps, list) else [steps]) if "_meet_peeled_" in s.kernel}

    # GPT-2's rows: 6282 bf16 vectors in chunks of 1024 (128 threads x 8), 2048, 4096; 12564 fp32 ones in
    # chunks of 2048 (256 x 8), 4096, 8192
    assert {k: s.grid for k, s in meets(4096, 50257, "bf16", False).items()} == {
        "softmax_bf16_meet_peeled_t128": 4096 * 7, "softmax_bf16_meet_peeled_t256": 4096 * 4,
        "softmax_bf16_meet_peeled_t512": 4096 * 2}
    assert {k: s.grid for k, s in meets(4096, 50257, "fp32", False).items()} == {
        "softmax_fp32_meet_peeled_t256": 4096 * 7, "softmax_fp32_meet_peeled_t512": 4096 * 4,
        "softmax_fp32_meet_peeled_t1024": 4096 * 2}
    # bf16's chunk (exponentials held packed) on aligned rows too; fp32's is v10's there
    assert {k: s.grid // 4096 for k, s in meets(4096, 151936, "bf16", True).items()} == {
        "softmax_bf16_meet_peeled_t128": 19, "softmax_bf16_meet_peeled_t256": 10, "softmax_bf16_meet_peeled_t512": 5}
    assert not meets(4096, 151936, "fp32", True)
    # a row a chunk's vectors short of two chunks, and a multiple of them: every offset's body fits
    for cols in (16392, 16384 + 8 * 1024 - 1, 3 * 8 * 1024, 3 * 8 * 1024 + 7):
        for step in meets(3, cols, "bf16", False).values():
            split, threads = step.grid // 3, step.block
            per = threads * 8  # vectors a chunk
            for head in range(8):
                body = (cols - head) // 8
                assert body <= split * per and (max(body - 1, 0)) // per < split, (cols, head, step)
            assert step.capacity >= cols
    for key in ((8, 16384, "bf16", False), (4, 2 * 1048576, "fp32", False)):
        assert not meets(*key), key  # one block holds it; more than 32 chunks
    launch = meet_peeled_launch.cl.Launch
    v10 = meet_launch.plan_v10(64, 262144, "bf16", True)
    assert meet_peeled_launch.plan_v11(64, 262144, "bf16", True) == v10 + [
        launch(f"softmax_bf16_meet_peeled_t{t}", 64 * n, t, n * t * 64 + 7)
        for t, n in ((128, 32), (256, 16), (512, 8))]


def test_v11_drops_its_peeled_meetings_where_the_output_is_not_at_the_input_s_offset(monkeypatch):
    fake_gpu(monkeypatch, H100)
    done = Compiled(monkeypatch)
    from kernels.common import tuning
    monkeypatch.setattr(tuning, "PICKED", {})
    timed = []
    monkeypatch.setattr(tuning, "pick", lambda key, steps, run, device: timed.append(steps) or steps[0])
    launch = KERNEL.revision("v11_meet_peeled").load()
    x = torch.randn(3, 50257).to(torch.bfloat16)
    launch((x,), torch.empty_like(x))  # contiguous: every row at its output's offset
    assert any("_meet_peeled_" in s.kernel for s in timed[-1])
    xs = torch.randn(3, 50260).to(torch.bfloat16)[:, 1:50258]  # rows 1 element further from it than out's
    launch((xs,), torch.empty(3, 50257, dtype=torch.bfloat16))
    assert not any("_peeled_" in s.kernel for s in timed[-1]) and done.launched


ODD_MEET_SHAPES = ((3, 16392), (5, 32001), (9, 50257), (3, 65535), (2, 131071), (3, 151936), (1, 262147))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_every_peeled_meeting_candidate_passes_the_gate_on_gpu(monkeypatch, dtype):
    """v11's peeled meeting layouts, each forced in turn, on odd rows (heads and tails of every
    length across the rows) and aligned ones, every gate case (the strided one: not at out's offset,
    so v10's plan)."""
    from kernels.softmax import meet_peeled_launch

    failed, forced = _gate_each_forced(monkeypatch, meet_peeled_launch, "plan_v11", "v11_meet_peeled",
                                       ODD_MEET_SHAPES, dtype, False, "_meet_peeled_")
    assert forced >= 2 * len(ODD_MEET_SHAPES) and not failed, "\n".join(failed)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_a_peeled_block_that_stops_polling_finds_the_row_bitwise_as_the_meeting_does(monkeypatch, dtype):
    """polls=0 and 1 against the meeting, bit for bit, on every peeled candidate and across launches
    that flip the epoch; bf16's outputs within one ulp of float64's softmax rounded to bf16 (the
    exponential is rounded before the product), fp32's within 1e-5."""
    from kernels.common import tuning
    from kernels.softmax import meet_peeled_launch

    source = KERNEL.revision("v11_meet_peeled").sources[0]
    real_plan = meet_peeled_launch.plan_v11
    monkeypatch.setattr(tuning, "fastest", lambda run, candidates, device: candidates[0])
    gen = torch.Generator(device="cuda").manual_seed(21)
    for shape in ((3, 50257), (5, 151936), (2, 262147)):
        (x,) = KERNEL.make_inputs(shape, dtype, gen, "cuda", "random")
        x = x.contiguous()
        ref = torch.softmax(x.double(), dim=-1)
        for cand in [s for s in real_plan(*shape, dtype, False) if "_meet_peeled_" in s.kernel]:
            outs = _launched_at_each_polls(monkeypatch, meet_peeled_launch, "plan_v11", source, x, cand)
            if dtype == "bf16":
                want = ref.to(torch.bfloat16).view(torch.int16).int()
                ulps = (outs[0].view(torch.int16).int() - want).abs().max().item()
                assert ulps <= 1, (shape, cand.kernel, ulps)
            else:
                assert (outs[0].double() - ref).abs().max().item() < 1e-5, (shape, cand.kernel)
            for i, out in enumerate(outs[1:], 1):
                assert torch.equal(out, outs[0]), (shape, cand.kernel, i)
