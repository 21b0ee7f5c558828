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
