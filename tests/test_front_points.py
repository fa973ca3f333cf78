"""The front page's points (kernlog.render.arc): a line for every GPU that swept a step of the kernel,
each in its own sweep's first dtype and at a shape where a step ran; the headline line's best step swapped
for its sweep's fastest only where the page's profile finds the two within noise and the sweep ran that
one at least as fast on as current a source. On synthetic sweeps shaped as kernlog.render.sweeps makes them."""
from kernlog.render import arc
from kernlog.render.sweeps import bar_cell

REFS = ["torch"]


def _row(shape, dtype, values, stale=()):
    elems = 1
    for part in shape.split("x"):
        elems *= int(part)
    row = {"shape": shape, "dtype": dtype, "elems": elems, "values": values, "stale": list(stale),
           "runs": {}, "fails_now": {}}
    steps = {r: v for r, v in values.items() if r.startswith("v") and v is not None}  # triton: a counterpart
    step = max(steps, key=steps.get) if steps else None
    row["bars"] = [bar_cell(row, step, REFS, 0.02)]
    return row


def _sweep(gpu, rows):
    return {"gpu": gpu, "rows": rows, "band": 0.02, "unit": "GB/s", "ceiling": None}


def test_the_swap_to_a_tie_needs_it_faster_and_as_current():
    at = "64x64"
    faster = _sweep("G", [_row(at, "fp32", {"v1": 100.0, "v2": 104.0, "torch": 90.0})])
    assert arc.point(faster, at, "fp32", "v1", best="v1", tied=("v2",))["best"] == "v2"  # the table's figures
    assert arc.point(faster, at, "fp32", "v1", best="v1")["best"] == "v1"  # not within noise: the page's
    # the page's best a counterpart that ran faster than every step: never swapped for a slower tie
    counterpart = _sweep("G", [_row(at, "fp32", {"v1": 100.0, "v2": 104.0, "triton": 110.0, "torch": 90.0})])
    p = arc.point(counterpart, at, "fp32", "v1", best="triton", tied=("v2",))
    assert (p["best"], p["rate"]) == ("triton", 110.0)
    # the tie's figure from an older source (stale), the page's best current: the current one stays
    stale = _sweep("G", [_row(at, "fp32", {"v1": 100.0, "v2": 104.0, "torch": 90.0}, stale=("v2",))])
    p = arc.point(stale, at, "fp32", "v1", best="v1", tied=("v2",))
    assert (p["best"], p["stale"]) == ("v1", False)


def test_every_other_gpu_gets_a_line_in_its_own_dtype_where_a_step_ran():
    main = _sweep("A", [_row("64x64", "fp32", {"v0": 50.0, "v1": 100.0, "torch": 90.0})])
    # B swept bf16 only, and at the profile shape only the reference ran
    other = _sweep("B", [_row("64x64", "bf16", {"torch": 80.0}), _row("64x128", "bf16", {"v0": 60.0, "v1": 120.0,
                                                                                          "torch": 100.0})])
    got = arc.elsewhere([main, other], main, "64x64", ("fp32", "bf16"), ["v0", "v1"])
    assert [(p["gpu"], p["shape"], p["dtype"], p["best"]) for p in got] == [("B", "64x128", "bf16", "v1")]
    # the headline ladder's GPU swept nothing: every GPU that did still has its line
    got = arc.elsewhere([main, other], None, "64x64", ("fp32", "bf16"), ["v0", "v1"])
    assert [p["gpu"] for p in got] == ["A", "B"]


def test_a_front_point_never_lands_where_only_references_ran():
    sw = _sweep("A", [_row("64x64", "fp32", {"torch": 90.0}), _row("64x96", "fp32", {"v1": 100.0, "torch": 90.0})])
    assert arc.front_shape(sw, "64x64", "fp32") == "64x96"
    assert arc.swept_dtype(sw, ("bf16", "fp32"), ["v1"]) == "fp32"


def test_a_best_step_the_sweep_never_ran_is_named_not_replaced_silently():
    """A rung profiled after the sweep ran: the line keeps the sweep's figures (its best step there)
    and names the page's best as not swept, never passing the older step off as the page's best."""
    at = "64x64"
    sw = _sweep("G", [_row(at, "fp32", {"v1": 100.0, "v2": 104.0, "torch": 90.0})])
    p = arc.point(sw, at, "fp32", "v1", best="v3")
    assert (p["best"], p["rate"], p["unswept"]) == ("v2", 104.0, "v3")
    assert arc.point(sw, at, "fp32", "v1", best="v2")["unswept"] is None
    # swept there, and the line quotes a faster tie instead: the page's best was swept, not "unswept"
    p = arc.point(sw, at, "fp32", "v1", best="v1", tied=("v2",))
    assert (p["best"], p["unswept"]) == ("v2", None)


def test_the_second_arc_is_at_the_headline_s_shape_where_that_gpu_has_it():
    """arc.beyond: of another GPU's ladders whose best step is a later rung, the one at the headline's
    shape and dtype, though another of that GPU's sorts first; any such ladder where it has none there."""
    def lad(gpu, shape, best):
        return {"gpu": {"slug": gpu}, "shape": shape, "dtype": "bf16", "best": best}

    def best_of(ladder):
        return {"rec": type("Rec", (), {"revision": ladder["best"]})()}
    head = lad("a", "1x12x1024x64", "v2")
    first, same = lad("b", "16x16x512x128", "v5"), lad("b", "1x12x1024x64", "v5")
    assert arc.beyond([head, first, same], {"v5"}, best_of) is same
    assert arc.beyond([head, first], {"v5"}, best_of) is first
    assert arc.beyond([head, first, same], {"v4"}, best_of) is None  # its best is no later rung
