"""Known-wrong kernels that one relative L2 error over the whole output let through, kept to
prove that the gate's row, element and second-launch checks reject them, and that `recheck`
catches an output gone wrong during a timing pass; each beside a correct launcher that passes
the same gate. Plain torch launchers on CPU tensors, and on a GPU (marked)."""
import os

import pytest
import torch

from kernlog.registry import find_root, load_kernel
from kernlog.run import gate
from kernlog.spec import Revision

ROOT = find_root()
SOFTMAX = load_kernel(ROOT, "softmax")
DROPOUT = load_kernel(ROOT, "dropout")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _rev(fn, kind="triton", **kw):
    # kind "triton": held to the custom-kernel contract of writing into `out`.
    return Revision("wrong", kind, (), lambda: fn, "known wrong", **kw)


def _check(fn, shape, dtype, device, kernel=SOFTMAX, seed=0, **kw):
    # a fixed seed: the last-8 test below misses one row in ~500 (see there)
    return gate.check_revision(kernel, _rev(fn, **kw), device, shapes=[shape], dtypes=[dtype], seed=seed)


def _softmax(inputs, out):
    return out.copy_(torch.softmax(inputs[0].float(), -1))


def _one_row_lost_a_chunk(inputs, out):
    """Row 1234's sum misses its last 16 columns, as a split kernel that lost one chunk's partial
    sum would: that row comes out ~25% high, every other row right."""
    x = inputs[0].float()
    e = torch.exp(x - x.amax(-1, keepdim=True))
    s = e.sum(-1, keepdim=True)
    s[1234] = e[1234, :-16].sum()
    return out.copy_(e / s)


def _last_8_doubled(inputs, out):
    _softmax(inputs, out)
    out[:, -8:] *= 2
    return out


def _stale_workspace():
    """Row sums added into a workspace zeroed when it is allocated, not at each launch: the first
    launch is right, each later one divides by the sums of all launches so far."""
    sums = {}

    def launch(inputs, out):
        x = inputs[0].float()
        e = torch.exp(x - x.amax(-1, keepdim=True))
        ws = sums.setdefault(x.shape, torch.zeros(x.shape[0], 1, device=x.device))
        ws += e.sum(-1, keepdim=True)
        return out.copy_(e / ws)

    return launch


def _memoized():
    """Skips the kernel when launched again on the same input and output: the buffer holds the
    answer already, unless someone else wrote it in between."""
    seen = set()

    def launch(inputs, out):
        key = (inputs[0].data_ptr(), out.data_ptr())
        if key not in seen:
            seen.add(key)
            _softmax(inputs, out)
        return out

    return launch


def _jittery(inputs, out):
    """Right to a few fp32 ulps, but different bits at each launch, as a sum in atomics' order."""
    y = torch.softmax(inputs[0].double(), -1)
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    return out.copy_(y * (1 + 3e-7 * torch.randn(y.shape, generator=gen, dtype=torch.float64).to(y.device)))


@pytest.mark.parametrize("device", DEVICES)
def test_one_bad_row_among_thousands_is_rejected(device):
    fail = gate.first_failure(_check(_one_row_lost_a_chunk, (4096, 64), "bf16", device))
    assert fail is not None and fail.case == "random"
    assert fail.problem.startswith("row 1234 error") and "(1 of 4096 rows)" in fail.problem
    assert fail.rel_error <= gate.TOLERANCE["bf16"].l2  # what the whole-output check alone accepted
    assert gate.first_failure(_check(_softmax, (4096, 64), "bf16", device)) is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_last_8_of_a_131072_long_row_doubled_is_rejected(device, dtype):
    """At full length: a torch launcher takes ~1 s here. Half of a row's elements are under 1% of
    its mean, which the atol lets through: a row slips when all 8 are (1 seed in ~500 in bf16,
    none in 2000 in fp32); the other 1-row cases make such a row NaN or one-hot."""
    fail = gate.first_failure(_check(_last_8_doubled, (1, 131072), dtype, device))
    assert fail is not None and fail.case == "random"
    assert "elements over" in fail.problem and not fail.problem.startswith("row")
    assert int(fail.problem.split("worst [0, ")[1].split("]")[0]) >= 131072 - 8
    assert fail.rel_error <= gate.TOLERANCE[dtype].l2
    assert gate.first_failure(_check(_softmax, (1, 131072), dtype, device)) is None


@pytest.mark.parametrize("device", DEVICES)
def test_right_once_then_wrong_fails_the_second_launch(device):
    fail = gate.first_failure(_check(_stale_workspace(), (5, 1000), "fp32", device))
    assert fail is not None and fail.case == SOFTMAX.cases[0]
    assert fail.problem.startswith("second launch differs from the first in 5000 of 5000 elements")
    # a revision that may round apart from launch to launch is still held to the tolerance
    fail = gate.first_failure(_check(_stale_workspace(), (5, 1000), "fp32", device, deterministic=False))
    assert fail is not None and fail.problem.startswith("second launch: error")


@pytest.mark.parametrize("device", DEVICES)
def test_a_launch_that_writes_nothing_the_second_time_is_rejected(device):
    fail = gate.first_failure(_check(_memoized(), (5, 1000), "fp32", device))
    assert fail is not None and fail.problem.startswith("second launch differs") and fail.problem.endswith("then nan")


@pytest.mark.parametrize("device", DEVICES)
def test_rounding_that_moves_between_launches_passes_only_where_declared(device):
    fail = gate.first_failure(_check(_jittery, (5, 1000), "fp32", device))
    assert fail is not None and "second launch differs" in fail.problem
    assert gate.first_failure(_check(_jittery, (5, 1000), "fp32", device, deterministic=False)) is None


def _dropout_ignoring_its_seed(inputs, out):
    x, p, _ = inputs
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    keep = (torch.rand(x.shape, generator=gen) >= p).to(x.device)
    return out.copy_(torch.where(keep, x.float() / (1 - p), 0.0))


def test_stochastic_kernels_repeat_bit_for_bit_given_their_seed():
    """Dropout draws from the seed in its inputs, the framework's from torch's generator, which
    the gate seeds before each launch: both repeat. One drawing from elsewhere does not."""
    for name in ("v0_rand", "torch"):
        assert gate.first_failure(gate.check_revision(DROPOUT, DROPOUT.revision(name), "cpu", shapes=[(4099,)])) is None
    fail = gate.first_failure(_check(_dropout_ignoring_its_seed, (4099,), "fp32", "cpu", kernel=DROPOUT))
    assert fail is not None and "second launch differs" in fail.problem


def _timed(launch, device, n=10):
    """What the profiler holds after a timing pass of n launches: (inputs, out)."""
    inputs = SOFTMAX.make_inputs((64, 1000), "fp32", torch.Generator().manual_seed(0), device, "random")
    out = SOFTMAX.make_output(inputs)
    gate.poison(out)
    for _ in range(n):
        launch(inputs, out)
    return inputs, out


@pytest.mark.parametrize("device", DEVICES)
def test_recheck_catches_an_output_gone_wrong_in_the_timing_pass(device):
    launch = _stale_workspace()
    res = gate.recheck(SOFTMAX, _rev(launch), launch, *_timed(launch, device), "fp32", shape=(64, 1000))
    assert not res.ok and res.problem.startswith("after the timing pass: error")
    assert res.shape == (64, 1000) and res.case == "random" and res.revision == "wrong"
    ok = gate.recheck(SOFTMAX, _rev(_softmax), _softmax, *_timed(_softmax, device), "fp32")
    assert ok.ok and ok.shape == (64, 1000), ok.line()


@pytest.mark.parametrize("device", DEVICES)
def test_recheck_launches_a_framework_reference_once_more(device):
    """A torch revision returns its own tensor and leaves `out` poisoned: the recheck launches it."""
    fresh = lambda inputs, out: torch.softmax(inputs[0], -1)  # noqa: E731
    assert gate.recheck(SOFTMAX, _rev(fresh, "torch"), fresh, *_timed(fresh, device), "fp32").ok
    # the same launcher held to writing `out`: the poison the timing pass left is what is checked
    res = gate.recheck(SOFTMAX, _rev(fresh), fresh, *_timed(fresh, device), "fp32")
    assert not res.ok and "non-finite or unwritten" in res.problem


@pytest.mark.gpu
@pytest.mark.parametrize("rev_name", ["triton", "v7_bf16_packed"])
def test_corrupted_gpu_softmax_is_rejected_and_the_real_one_passes(rev_name):
    """The ladder's own kernels on the H100, with the last 8 outputs doubled after each launch."""
    rev = SOFTMAX.revision(rev_name)
    launch = rev.load()

    def corrupted(inputs, out):
        launch(inputs, out)[:, -8:] *= 2
        return out

    for shape in ((1, 131072), (3, 65536)):
        fail = gate.first_failure(gate.check_revision(SOFTMAX, rev, "cuda", shapes=[shape], dtypes=["bf16"],
                                                      seed=0, launch=corrupted))
        assert fail is not None and "elements over" in fail.problem, shape
        good = gate.check_revision(SOFTMAX, rev, "cuda", shapes=[shape], dtypes=["bf16"], launch=launch)
        assert gate.first_failure(good) is None, gate.first_failure(good).line()


def test_an_output_of_the_wrong_shape_is_named_as_such():
    import torch

    err, problem = gate.compare(torch.zeros(3, 4), torch.zeros(4, 3, dtype=torch.float64))
    assert err == float("inf") and problem == "shape (3, 4) != reference (4, 3)"

