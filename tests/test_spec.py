"""Revision identity (the source hash that marks stored profiles stale) and shapes."""
import dataclasses
import importlib.util

import pytest

from kernlog.spec import Revision, parse_shape


def _module(path, body):
    path.write_text(body)
    spec = importlib.util.spec_from_file_location(f"m_{abs(hash(str(path)))}_{len(body)}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LOADER = "def load():\n    return lambda inputs, out: inputs[0] + 1\n"


def test_reference_in_init_is_identified_by_its_loader_not_the_whole_file(tmp_path):
    init = tmp_path / "__init__.py"
    before = Revision("ref", "torch", (init,), _module(init, LOADER).load, "c", role="reference").sha256()
    grown = Revision("ref", "torch", (init,), _module(init, LOADER + "SHAPES = (1, 2)\n").load, "c").sha256()
    changed = Revision("ref", "torch", (init,), _module(init, LOADER.replace("+ 1", "+ 2")).load, "c").sha256()
    assert before == grown
    assert before != changed


def test_kernel_source_is_hashed_whole(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text("// v1\n")
    a = Revision("k", "cuda", (cu,), lambda: None, "c").sha256()
    cu.write_text("// v2\n")
    assert Revision("k", "cuda", (cu,), lambda: None, "c").sha256() != a


@pytest.mark.parametrize("text,shape", [("8192x4096", (8192, 4096)), ("33554432", (33554432,)),
                                        ("2X3x4", (2, 3, 4))])
def test_parse_shape(text, shape):
    assert parse_shape(text) == shape


@pytest.mark.parametrize("text", ["", "0x4", "4x", "ax4", "-1x4", "4x4x"])
def test_parse_shape_rejects(text):
    with pytest.raises(ValueError):
        parse_shape(text)


@pytest.mark.parametrize("name", ["../x", "V1", "a/b", "", "_x"])
def test_revision_names_are_plain(name):
    with pytest.raises(ValueError):
        Revision(name, "torch", (), lambda: None, "c")


def test_no_revision_may_take_the_copy_columns_name():
    from kernlog.spec import COPY, Kernel

    rev = Revision(COPY, "torch", (), lambda: None, "a copy")
    with pytest.raises(ValueError, match="copy column"):
        Kernel("k", (rev,), None, None, None, None, (), (), (1,))


def test_a_kernel_refuses_duplicate_names_the_copy_column_and_an_unknown_ceiling():
    from kernlog.spec import COPY, Kernel

    def rev(name):
        return Revision(name, "torch", (), lambda: None, "", "")

    def kernel(names, ceiling="copy"):
        return Kernel("k", tuple(rev(n) for n in names), None, None, None, None, ((1,),), ((1,),), (1,),
                      ceiling=ceiling)

    assert kernel(["a", "b"], "matmul").ceiling == "matmul" and kernel(["a"]).revision("a").name == "a"
    with pytest.raises(ValueError, match="^kernel k: two revisions named .a.: a revision.s name is its own$"):
        kernel(["a", "a"])
    with pytest.raises(ValueError, match=f"^kernel k: '{COPY}' is the sweep's copy column, not a revision name$"):
        kernel([COPY])
    with pytest.raises(ValueError, match="^kernel k: ceiling must be 'copy' or 'matmul'$"):
        kernel(["a"], "flops")


def test_shape_families_are_checked_and_resolved():
    from kernlog.registry import find_root, load_kernel
    from kernlog.spec import Family

    with pytest.raises(ValueError, match="family name"):
        Family("Bad Name", "", ((1, 2),))
    with pytest.raises(ValueError, match="positive integers"):
        Family("empty", "", ())
    k = load_kernel(find_root(), "softmax")
    assert k.family_shapes(["decode"]) == list(next(f.shapes for f in k.families if f.name == "decode"))
    everything = k.family_shapes(["all"])
    assert len(everything) == len(set(everything)) == sum(len(f.shapes) for f in k.families)
    assert k.family_shapes(["decode", "decode"]) == k.family_shapes(["decode"])
    with pytest.raises(KeyError, match="no family 'nope'; families: vocab, decode"):
        k.family_shapes(["nope"])
    with pytest.raises(ValueError, match="has not 2 dimensions"):
        dataclasses.replace(k, families=(Family("odd", "", ((1, 2, 3),)),))
    with pytest.raises(ValueError, match="has not 2 dimensions"):
        dataclasses.replace(k, families=(Family("odd", "", ((1, 2),), check=((3,),)),))
    with pytest.raises(ValueError, match="positive integers"):
        Family("zero", "", ((1, 2),), check=((0, 2),))
    with pytest.raises(KeyError, match="declares no shape family"):
        load_kernel(find_root(), "vector_add").family_shapes(["all"])


def test_the_gate_checks_the_families_small_versions_after_the_check_shapes():
    from kernlog.registry import find_root, load_kernel
    from kernlog.spec import Family

    k = load_kernel(find_root(), "softmax")
    assert k.gate_shapes[:len(k.check_shapes)] == k.check_shapes
    small = [s for f in k.families for s in f.check]
    assert set(k.gate_shapes) == set(k.check_shapes) | set(small) and len(set(k.gate_shapes)) == len(k.gate_shapes)
    assert (3, 50257) in k.gate_shapes and (2, 300007) in k.gate_shapes
    again = dataclasses.replace(k, families=(Family("dup", "", ((1, 2),), check=(k.check_shapes[0], (9, 9))),))
    assert again.gate_shapes == k.check_shapes + ((9, 9),)


def test_a_revision_declines_only_what_it_declares():
    from kernlog.registry import find_root, load_kernel

    k = load_kernel(find_root(), "softmax")
    liger = k.revision("liger")
    assert liger.role == "reference" and liger.refusal((4, 65536)) == ""
    assert "65536" in liger.refusal((4, 65537))
    assert k.revision("torch").refusal((1, 1 << 20)) == ""


def test_torch_compile_raises_past_its_recompile_limit_rather_than_running_eager(monkeypatch):
    """Past Dynamo's limit a compiled function runs eagerly with a warning: a torch.compile column
    timing eager (the first family sweep did, on the H100). kernlog raises the limits for a
    sweep's shapes, asks Dynamo to raise past them, and compiles the function itself, static."""
    import torch

    from kernlog.frameworks import RECOMPILE_LIMIT, compiled

    cfg = torch._dynamo.config
    if not hasattr(cfg, "recompile_limit"):  # seen only inside mutmut's in-process runner
        pytest.skip("torch._dynamo.config has no recompile_limit in this process")
    for name, value in (("recompile_limit", 8), ("accumulated_recompile_limit", 8),
                        ("fail_on_recompile_limit_hit", False)):
        monkeypatch.setattr(cfg, name, value)  # Dynamo's defaults (another test may have compiled)
    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append((fn, kw)) or "compiled")

    def fn(x):
        return x + 1

    assert compiled(fn) == "compiled" and calls == [(fn, {"dynamic": False})]
    assert cfg.fail_on_recompile_limit_hit is True
    assert cfg.recompile_limit == RECOMPILE_LIMIT and cfg.accumulated_recompile_limit == 4 * RECOMPILE_LIMIT
    compiled(fn, dynamic=None)
    assert calls[-1] == (fn, {"dynamic": None})
