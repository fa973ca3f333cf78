"""Per-GPU dispatch tables (docs/dispatch.md): `kernlog dispatch OP --gpu G` for a GPU other than
the one whose sweep makes dispatch.json writes dispatch.<G>.json beside it; on that GPU a call
takes its own class there first, and everything else (the nearest class, the fallback, a class the
GPU's sweep lacks) from dispatch.json. The committed per-GPU tables are what their sweeps make."""
import copy
from types import SimpleNamespace

import pytest
import torch

from kernlog import library
from kernlog.library import Dispatched, gpu_table_paths, load_table, pick, table_path
from kernlog.render import dispatch as render
from tests.helpers import ROOT
from tests.test_dispatch import SOFTMAX, build

OPS = ("softmax", "layernorm", "rmsnorm", "gelu", "dropout", "matmul_relu", "attention")
COMMITTED = [(op, gpu) for op in OPS for gpu in gpu_table_paths(ROOT, op)]


def own_table():
    """A GPU's own table: the synthetic sweep with its 4096x8192 fp32 class won by triton, then v0_naive."""
    own = copy.deepcopy(build())
    cls = next(c for c in own["classes"] if c["points"] == ["4096x8192"] and c["dtype"] == "fp32")
    cls["ranking"] = [["triton", 1.0], ["v0_naive", 9.0]]
    cls["revision"], cls["runner_up"] = "triton", "v0_naive"
    return own


def test_a_call_in_a_class_of_its_gpus_own_table_takes_that_class():
    table, own = build(), own_table()
    assert pick(table, (4096, 8192), "fp32").revision == "v10_meet"  # the table's own class
    got = pick(table, (4096, 8192), "fp32", own=own)
    assert (got.revision, got.how) == ("triton", "gpu") and "this GPU's own class of 4096x8192" in got.line()
    # its pick declined or unable to run here: the next of its ranking, then the table's
    assert pick(table, (4096, 8192), "fp32", skip={"triton"}, own=own).revision == "v0_naive"
    back = pick(table, (4096, 8192), "fp32", skip={"triton", "v0_naive"}, own=own)
    assert (back.revision, back.how) == ("v10_meet", "class")


def test_only_the_calls_own_class_is_taken_from_the_gpus_table():
    table, own = build(), own_table()
    near = pick(table, (2048, 8192), "fp32", own=own)  # nearest 4096x8192 in both: the table's, not the GPU's
    assert (near.revision, near.how) == ("v10_meet", "nearest")
    far = pick(table, (4096, 1 << 20), "fp32", own=own)
    assert far.how == "fallback" and far.revision == table["fallback"]["fp32"][0]


def test_the_entry_point_reads_a_gpus_table_on_that_gpu_only(monkeypatch):
    op = Dispatched(SOFTMAX, build(), gpu_tables={"nvidia-h200": own_table()})
    monkeypatch.setattr(op, "_launcher", lambda name, device: None)  # anything loads
    assert op.pick((4096, 8192), "fp32", "cuda", "nvidia-h200").revision == "triton"
    assert op.pick((4096, 8192), "fp32", "cuda", "nvidia-h100-80gb-hbm3").revision == "v10_meet"
    assert op.pick((4096, 8192), "fp32", "cuda").revision == "v10_meet"
    assert op.pick((4096, 8192), "fp32", "cpu", "nvidia-h200").revision == "v10_meet"  # never on the CPU


def test_a_cpu_call_never_asks_which_gpu(monkeypatch):
    op = Dispatched(SOFTMAX, build(), gpu_tables={"nvidia-h200": own_table()})
    monkeypatch.setattr(library, "device_gpu", lambda index: pytest.fail("asked for a GPU on the CPU"))
    x = torch.randn(3, 300)
    torch.testing.assert_close(op((x,)), torch.softmax(x, -1))


def test_the_device_is_named_as_profiles_spells_its_folder(monkeypatch):
    from kernlog import cuda

    monkeypatch.setattr(cuda, "device_caps", lambda index=None: SimpleNamespace(name="NVIDIA H100 80GB HBM3"))
    assert library.device_gpu(0) == "nvidia-h100-80gb-hbm3"


def test_tables_are_named_by_gpu_and_opened_with_the_operators():
    assert table_path(ROOT, "attention").name == "dispatch.json"
    assert table_path(ROOT, "attention", "nvidia-h200").name == "dispatch.nvidia-h200.json"
    assert render.own_gpu(ROOT, "attention", None) is None
    primary = load_table(table_path(ROOT, "attention"))["source"]["gpu_slug"]
    assert render.own_gpu(ROOT, "attention", primary) is None  # the GPU that makes dispatch.json
    assert render.own_gpu(ROOT, "attention", "nvidia-h200") == "nvidia-h200"
    op = Dispatched.open(ROOT, "attention")
    assert set(op.gpu_tables) == set(gpu_table_paths(ROOT, "attention")) and op.gpu_tables
    assert Dispatched.open(ROOT, "attention", path=table_path(ROOT, "attention")).gpu_tables == {}


@pytest.mark.parametrize("op, gpu", COMMITTED)
def test_the_committed_gpu_table_is_what_that_gpus_sweep_makes(op, gpu):
    assert load_table(table_path(ROOT, op, gpu))["source"]["gpu_slug"] == gpu
    assert render.check(ROOT, op, gpu) == ""


def test_the_page_says_where_a_gpus_table_picks_otherwise():
    """How many of its classes pick otherwise than the table above; those it wins beyond the noise by
    name (a tie with the runner-up is counted, not named: the table above's pick is as fast there)."""
    page = render.page_md(ROOT, "softmax")
    line = next(ln for ln in page.splitlines() if ln.startswith("On NVIDIA H200"))
    own = load_table(table_path(ROOT, "softmax", "nvidia-h200"))
    kept = load_table(table_path(ROOT, "softmax"))["classes"]
    primary = {(c["dtype"], tuple(c["points"])): c["revision"] for c in kept}
    differ = [c for c in own["classes"]
              if c["revision"] and primary.get((c["dtype"], tuple(c["points"]))) != c["revision"]]
    clear = [c for c in differ if c["margin"] is None or c["margin"] > c["noise"]]
    assert differ and clear and len(clear) < len(differ)  # what the committed tables hold: both kinds said
    assert f"differ from the table above's at {len(differ)} of them" in line
    for c in own["classes"]:
        named = f"{'/'.join(c['points'])} {c['dtype']}"
        assert (named in line) == (c in clear), named
        if c in clear:
            assert f"{c['revision']} at " in line
    ties = len(differ) - len(clear)
    assert f"{ties} {'is a tie' if ties == 1 else 'are ties'} with the runner-up" in line
    assert "`kernels/softmax/dispatch.nvidia-h200.json`" in line
