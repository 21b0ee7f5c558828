"""tools/timeline_compare.py: the two backends' GPU timelines of a model-suite dump."""

from __future__ import annotations

import gzip
import json

from tools import timeline_compare


def _k(name, start, us, gap, launch=None):
    item = {"kernel": name, "start_us": start, "us": us, "gap_us": gap}
    return item if launch is None else {**item, "launch": launch}


FAST, SLOW = "grid 64,1,1 block 256,1,1", "grid 256,1,1 block 32,1,1"


STOCK = [_k("gemm", 0.0, 30.0, 0.0), _k("rotary", 30.0, 10.0, 0.0, FAST), _k("norm", 45.0, 3.0, 5.0)]
# Ours' rotary starts before the GEMM ends (5 µs counted twice in the sum) and runs 30 µs.
OURS = [
    _k("gemm", 0.0, 30.0, 0.0),
    _k("rotary", 25.0, 30.0, -5.0, SLOW),
    _k("norm", 60.0, 3.0, 5.0),
    _k("memcpy", 70.0, 1.0, 7.0),
]


def test_totals_count_the_overlap_once_and_the_idle_time_between():
    assert timeline_compare.totals(STOCK) == {"sum_us": 43.0, "busy_us": 43.0, "overlap_us": 0.0, "idle_us": 5.0}
    assert timeline_compare.totals(OURS) == {"sum_us": 64.0, "busy_us": 59.0, "overlap_us": 5.0, "idle_us": 12.0}
    assert timeline_compare.totals([]) == {"sum_us": 0.0, "busy_us": 0.0, "overlap_us": 0.0, "idle_us": 0.0}


def test_the_comparison_ranks_kernels_by_their_difference_with_what_ran_before(tmp_path, capsys):
    rows = timeline_compare.compare({"stock": STOCK, "ours": OURS}, top=2)
    assert [r["kernel"] for r in rows] == ["rotary", "memcpy"]
    assert rows[0]["stock"] == {"us": 10.0, "runs": 1, "gap_us": 0.0, "after": "gemm", "launches": [FAST]}
    assert rows[0]["ours"] == {"us": 30.0, "runs": 1, "gap_us": -5.0, "after": "gemm", "launches": [SLOW]}
    assert rows[1]["stock"] is None and rows[1]["ours"]["after"] == "norm" and rows[1]["ours"]["launches"] == []
    path = tmp_path / "b.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"block": "hf-x:small:train", "wrappers": {}, "timelines": {"stock": STOCK, "ours": OURS}}, f)
    timeline_compare.main([str(path), "--top", "1"])
    out = capsys.readouterr().out
    assert "overlap_us        5.0" in out and "after gemm" in out and "memcpy" not in out
    assert f"launch {FAST}" in out and f"launch {SLOW}" in out


def test_a_kernel_lists_each_launch_shape_it_ran_most_frequent_first():
    """One source run with two autotuned configs shows both shapes, the usual one first."""
    timeline = [_k("rotary", 0.0, 30.0, 0.0, SLOW), _k("rotary", 40.0, 9.0, 10.0, FAST)]
    timeline.append(_k("rotary", 60.0, 9.0, 11.0, FAST))
    assert timeline_compare.per_kernel(timeline)["rotary"]["launches"] == [FAST, SLOW]


def _wrapper(*kernels):
    """A wrapper's text compiling each (name, body) as Inductor's does."""
    return "\n".join(f"{n} = async_compile.triton('{n}', '''\n{body}\n''', device_str='cuda')" for n, body in kernels)


def test_kernels_of_one_source_on_both_sides_are_counted_by_whether_they_ran_one_shape(capsys, tmp_path):
    """Only a kernel both sides compiled from the same text counts: ``norm`` (two shapes)
    and ``rotary`` (one) do; ``add`` differs in text and ``mul`` has two texts on a side
    (a forward's and a backward's kernel of one name)."""
    stock = [
        _k("norm", 0.0, 10.0, 0.0, FAST),
        _k("rotary", 10.0, 5.0, 0.0, FAST),
        _k("add", 15.0, 2.0, 0.0, FAST),
        _k("mul", 17.0, 2.0, 0.0, FAST),
    ]
    ours = [
        _k("norm", 0.0, 40.0, 0.0, SLOW),
        _k("rotary", 40.0, 6.0, 0.0, FAST),
        _k("add", 46.0, 9.0, 0.0, SLOW),
        _k("mul", 55.0, 9.0, 0.0, SLOW),
    ]
    wrappers = {
        "stock": [_wrapper(("norm", "n1"), ("rotary", "r1"), ("add", "a1"), ("mul", "m1")), _wrapper(("mul", "m2"))],
        "ours": [_wrapper(("norm", "n1"), ("rotary", "r1"), ("add", "a2"), ("mul", "m1"))],
    }
    dump = {"block": "hf-x:small:train", "wrappers": wrappers, "timelines": {"stock": stock, "ours": ours}}
    rows = timeline_compare.same_source(dump)
    assert [(r["kernel"], r["one_shape"]) for r in rows] == [("norm", False), ("rotary", True)]
    assert rows[0]["stock_us"] == 10.0 and rows[0]["ours_launches"] == [SLOW]
    assert timeline_compare.kernel_source(wrappers["stock"][0], "rotary").endswith("r1\n")
    assert timeline_compare.kernel_source(wrappers["stock"][1], "rotary") is None
    path = tmp_path / "b.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(dump, f)
    timeline_compare.main([str(path), "--top", "3"])
    out = capsys.readouterr().out.split("one source:")[1]
    assert out.startswith(" 2, 1 with one launch shape") and f"launch {SLOW}" in out and "rotary" not in out
    # Ours ran 64 µs to stock's 19: 30 of the 45 in norm (two shapes), 1 in rotary (one).
    assert timeline_compare.tuned_apart_us(rows, one_shape=False) == 30.0
    assert timeline_compare.tuned_apart_us(rows, one_shape=True) == 1.0
    assert "ours - stock, µs: 45.0 in all, of it 30.0 in those with other shapes (tuned apart) and 1.0" in out
