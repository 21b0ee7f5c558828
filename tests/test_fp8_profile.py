"""tools.fp8_profile's reading of an Nsight Compute profile (CPU: a CSV as ncu writes it)."""

from __future__ import annotations

import csv

import pytest

from tools import fp8_profile

HEADER = ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
HEADER += ["Rule Name", "Rule Description"]
SHAPE = (8192, 8192, 8192)


def _write(path, launches):
    """Per launch (kernel, microseconds, pipe %): its duration, DRAM and L2 throughput
    (a third of the pipe %, and 10 below it), issue rate (a tenth of its index) and pipe rule."""
    with open(path, "w", newline="") as f:
        f.write("==PROF== Connected to process 1\nprofiled scaled_mm\n")
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(HEADER)
        for i, (kernel, us, pct) in enumerate(launches):
            w.writerow([i, kernel, "SpeedOfLight", "Duration", "ns", f"{us * 1000:,.0f}"])
            w.writerow([i, kernel, "SpeedOfLight", "DRAM Throughput", "%", f"{pct / 3:.2f}"])
            w.writerow([i, kernel, "SpeedOfLight", "L2 Cache Throughput", "%", f"{pct - 10:.2f}"])
            w.writerow([i, kernel, "WarpStateStats", "Issued Ipc Active", "inst/cycle", f"{i / 10:.2f}"])
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
    assert [r["dram_pct"] for r in rows] == [round((90.0 - i) / 3, 2) for i in range(len(names))]
    assert [r["l2_pct"] for r in rows] == [80.0 - i for i in range(len(names))]
    assert [r["ipc"] for r in rows] == [round(i / 10, 2) for i in range(len(names))]
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


def test_the_sweep_times_each_unpadded_rasterisation_fast_and_promoting(tmp_path):
    from inductor_cutedsl.kernels.config import fitted_swizzle
    from inductor_cutedsl.runtime.spec import KernelSpec

    # 2048 rows are 8 pair clusters of 128x128 tiles along M: rastering along N, a swizzle
    # of 16 would pad them to 16. The 112 tiles along N take every swizzle unpadded.
    m, n, k = 2048, 14336, 4096
    table = fp8_profile.sweep_ways(m, n, k, "row")
    assert list(table)[:2] == ["scaled_mm", "scaled_mm_fast"]
    ours = {name: spec for name, (spec, _) in table.items() if spec is not None}
    for name, spec in ours.items():
        assert spec.config.name() == name.split(":")[0]
        assert fitted_swizzle(spec.config, m, n) == spec.config.swizzle, name
        assert table[name][1] == spec.promote
    assert "128x128_c2x1_coop_rn16:p0" not in ours  # padded: the scheduler never runs it
    for swizzle in (1, 2, 4, 8, 16):
        assert {f"128x128_c2x1_coop_rm{swizzle}:p0", f"128x128_c2x1_coop_rm{swizzle}:p3"} <= set(ours)
    # the 128x256 tile has no registers for a second accumulator: fast only
    wide = [name for name in ours if name.startswith("128x256")]
    assert wide and all(name.endswith(":p0") for name in wide)
    # --specs writes every kernel's spec, readable as the rebuild reads them, and stops
    path = tmp_path / "specs.jsonl"
    result = fp8_profile.main(["--sweep", "--shape", f"{m}x{n}x{k}", "--specs", str(path)])
    specs = [KernelSpec.from_json(line) for line in path.read_text().splitlines()]
    assert result == {"specs": len(ours)} and specs == list(ours.values())
