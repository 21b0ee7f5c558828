"""tools.fp8_profile's reading of an Nsight Compute profile (CPU: a CSV as ncu writes it)."""

from __future__ import annotations

import csv

import pytest

from tools import fp8_profile

HEADER = ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
HEADER += ["Rule Name", "Rule Description"]
SHAPE = (8192, 8192, 8192)


def _write(path, launches):
    """One Duration metric and one pipe rule per launch: (kernel, microseconds, pipe %)."""
    with open(path, "w", newline="") as f:
        f.write("==PROF== Connected to process 1\nprofiled scaled_mm\n")
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(HEADER)
        for i, (kernel, us, pct) in enumerate(launches):
            w.writerow([i, kernel, "SpeedOfLight", "Duration", "ns", f"{us * 1000:,.0f}"])
            rule = f"Tensor is the highest-utilized pipeline ({pct}%) based on elapsed cycles"
            w.writerow([i, kernel, "ComputeWorkloadAnalysis", "", "", "", "HighPipeUtilization", rule])


def test_each_launch_is_read_as_its_way_with_the_promotions_cost_per_k_tile(tmp_path):
    names = list(fp8_profile.ways(*SHAPE, "row"))
    launches = []
    for i, name in enumerate(names):
        ours = name.split(":")[0]
        kernel = "nvjet_sm90_qqtst_128x128_128x6_1x1" if name.startswith("scaled_mm") else f"inductor_cutedsl_{ours}"
        # fast: cuBLASLt 700 us, ours 800; promoting: 100 us more per promotion mode number
        promote = int(name.split(":p")[1]) if ":p" in name else (0 if name.endswith("fast") else 1)
        launches.append((kernel, (700.0 if name.startswith("scaled_mm") else 800.0) + 100.0 * promote, 90.0 - i))
    path = tmp_path / "ncu.csv"
    _write(path, launches)
    rows = fp8_profile.read_ncu(str(path), *SHAPE, "row")
    assert [r["way"] for r in rows] == names
    assert [r["pipe_pct"] for r in rows] == [90.0 - i for i in range(len(names))]
    by_way = {r["way"]: r for r in rows}
    # 128x128 tiles: 4096 tiles of 64 k-tiles over 132 SMs, 1985.9 k-tiles per SM
    per_sm = 4096 * 64 / 132
    assert by_way["scaled_mm"]["k_tile_ns"] == pytest.approx(100e3 / per_sm, abs=0.1)
    assert by_way["128x128_c2x1_coop_rm8:p3"]["k_tile_ns"] == pytest.approx(300e3 / per_sm, abs=0.1)
    assert by_way["128x128_c2x1_coop_rm8:p3"]["k_tile_mma_ns"] == pytest.approx(800e3 / per_sm, abs=0.1)
    assert by_way["scaled_mm"]["k_tile_mma_ns"] == pytest.approx(700e3 / per_sm, abs=0.1)
    assert "k_tile_ns" not in by_way["128x128_c2x1_coop_rm8:p0"] and "k_tile_ns" not in by_way["scaled_mm_fast"]
    # a profile whose launches are not the ways in order is refused
    launches[2], launches[3] = launches[3], ("nvjet_sm90_qqtst_128x128_128x6_1x1", 800.0, 50.0)
    _write(path, launches)
    with pytest.raises(ValueError, match="not way"):
        fp8_profile.read_ncu(str(path), *SHAPE, "row")
