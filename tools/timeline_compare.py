"""Two backends' GPU timelines of one block, side by side: what a kernel that reads slow
in the model suite's profile sums ran after, and whether it waited or overlapped.

    python -m tools.timeline_compare DIR/hf-mistral-small-train.json.gz [--top 15]

Reads a file written by ``benchmarks.models --dump DIR`` (each backend's timeline: the
GPU's kernels, copies and fills in the order they ran, over a few calls of the block's
profiled step). Prints per side the GPU's busy time (the union of its work's intervals),
the sum of the work's durations (what the suite's GPU figure adds up), their difference
(time counted twice: work that started before the work before it ended) and the idle
time between; then the kernels whose time differs most between the sides, matched by
name, each with what ran just before it, the gap after that and its launch shapes (where
one source runs at two speeds with one shape, it ran one config; with two, the
autotuner picked differently). Last, the Triton kernels both sides compiled from one
source (same name, same text in the wrappers): how many ran one launch shape on both
sides, and those that did not. Inductor tunes these kernels in each compile; a kernel
whose tuned config is carried (``compat.autotune.carry_coordinate_descent``, given to
stock too by ``benchmarks.harness.stock_as_fair_stock``) runs one shape on both sides,
so a source with two shapes is a difference of tuning, not of the backends' code.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter

SIDES = ("stock", "ours")


def totals(timeline: list[dict]) -> dict[str, float]:
    """``sum_us``: the durations added up; ``busy_us``: the union of the intervals;
    ``overlap_us``: the difference (counted twice in the sum); ``idle_us``: the span from
    the first start to the last end that nothing covered."""
    busy = 0.0
    end = None
    for item in sorted(timeline, key=lambda k: k["start_us"]):
        start, stop = item["start_us"], item["start_us"] + item["us"]
        if end is None or start >= end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    total = sum(item["us"] for item in timeline)
    span = max((k["start_us"] + k["us"] for k in timeline), default=0.0) - min(
        (k["start_us"] for k in timeline), default=0.0
    )
    return {
        "sum_us": round(total, 2),
        "busy_us": round(busy, 2),
        "overlap_us": round(total - busy, 2),
        "idle_us": round(span - busy, 2),
    }


def per_kernel(timeline: list[dict]) -> dict[str, dict]:
    """Each kernel name's total time, runs, what ran just before it (the most frequent
    predecessor), its mean gap after that and its launch shapes (grid, block, registers
    and shared memory; each distinct one, most frequent first; none for copies and
    fills)."""
    out: dict[str, dict] = {}
    before: dict[str, Counter] = {}
    shapes: dict[str, Counter] = {}
    for i, item in enumerate(timeline):
        entry = out.setdefault(item["kernel"], {"us": 0.0, "runs": 0, "gap_us": 0.0})
        entry["us"] += item["us"]
        entry["runs"] += 1
        entry["gap_us"] += item["gap_us"]
        if i:
            before.setdefault(item["kernel"], Counter())[timeline[i - 1]["kernel"]] += 1
        if item.get("launch"):
            shapes.setdefault(item["kernel"], Counter())[item["launch"]] += 1
    for name, entry in out.items():
        entry["gap_us"] = round(entry["gap_us"] / entry["runs"], 2)
        entry["us"] = round(entry["us"], 2)
        entry["after"] = before[name].most_common(1)[0][0] if name in before else None
        entry["launches"] = [shape for shape, _ in shapes[name].most_common()] if name in shapes else []
    return out


def compare(timelines: dict[str, list[dict]], top: int) -> list[dict]:
    """The ``top`` kernel names whose total time differs most between the sides (a name
    only one side ran counts as 0 on the other)."""
    kernels = {side: per_kernel(timelines.get(side, [])) for side in SIDES}
    names = set(kernels["stock"]) | set(kernels["ours"])

    def total(side: str, name: str) -> float:
        return kernels[side].get(name, {}).get("us", 0.0)

    ranked = sorted(names, key=lambda n: -abs(total("ours", n) - total("stock", n)))
    return [{"kernel": name, **{side: kernels[side].get(name) for side in SIDES}} for name in ranked[:top]]


def kernel_source(wrapper: str, name: str) -> str | None:
    """The text ``name`` was compiled from in one wrapper (its ``async_compile.triton``
    call's source), or None where the wrapper compiles no kernel of that name."""
    start = wrapper.find(f"async_compile.triton('{name}', '''")
    if start < 0:
        return None
    end = wrapper.find("''', device_str", start)
    return wrapper[start:end] if end > 0 else None


def same_source(dump: dict) -> list[dict]:
    """The Triton kernels both sides ran from one source, each with its time and launch
    shapes per side and ``one_shape`` (the sides ran the same shapes), the largest time
    difference first. A name compiled from two sources on a side (a forward's and a
    backward's kernel of one name) is left out: its timeline mixes them."""
    kernels = {side: per_kernel(dump["timelines"].get(side, [])) for side in SIDES}
    rows = []
    for name in set(kernels["stock"]) & set(kernels["ours"]):
        sources = [
            {text for wrapper in dump["wrappers"].get(side, []) if (text := kernel_source(wrapper, name))}
            for side in SIDES
        ]
        if len(sources[0]) != 1 or sources[0] != sources[1]:
            continue
        stock, ours = kernels["stock"][name], kernels["ours"][name]
        rows.append(
            {
                "kernel": name,
                "one_shape": stock["launches"] == ours["launches"],
                **{f"{side}_us": kernels[side][name]["us"] for side in SIDES},
                **{f"{side}_launches": kernels[side][name]["launches"] for side in SIDES},
            }
        )
    return sorted(rows, key=lambda r: -abs(r["ours_us"] - r["stock_us"]))


def tuned_apart_us(rows: list[dict], one_shape: bool) -> float:
    """Ours' time less stock's, summed over the ``same_source`` rows that ran one launch
    shape on both sides (``one_shape``) or not: where a row's difference lies in kernels
    of one code, tuned apart, it is Inductor's tuning, not the backends'."""
    return round(sum(r["ours_us"] - r["stock_us"] for r in rows if r["one_shape"] == one_shape), 2)


def report(dump: dict, top: int) -> str:
    lines = [f"{dump.get('block')}: GPU timelines, µs over the traced calls"]
    figures = {side: totals(dump["timelines"].get(side, [])) for side in SIDES}
    for side in SIDES:
        lines.append(f"  {side:5}  " + "  ".join(f"{key} {value:10.1f}" for key, value in figures[side].items()))
    lines.append("kernels whose time differs most (stock | ours: µs, runs, mean gap before; what ran before):")
    for row in compare(dump["timelines"], top):
        lines.append(f"  {row['kernel'][:110]}")
        for side in SIDES:
            entry = row[side]
            if entry is None:
                lines.append(f"    {side:5}  -")
            else:
                after = (entry["after"] or "-")[:90]
                lines.append(
                    f"    {side:5}  {entry['us']:9.1f} us {entry['runs']:3d} runs  "
                    f"gap {entry['gap_us']:7.2f}  after {after}"
                )
                lines.extend(f"           launch {shape}" for shape in entry["launches"])
    shared = same_source(dump)
    apart = [row for row in shared if not row["one_shape"]]
    lines.append(
        f"Triton kernels both sides compiled from one source: {len(shared)}, "
        f"{len(shared) - len(apart)} with one launch shape on both sides"
    )
    lines.append(
        f"  ours - stock, µs: {figures['ours']['sum_us'] - figures['stock']['sum_us']:.1f} in all, of it "
        f"{tuned_apart_us(shared, one_shape=False):.1f} in those with other shapes (tuned apart) and "
        f"{tuned_apart_us(shared, one_shape=True):.1f} in those with one; the others (stock | ours):"
    )
    for row in apart[:top]:
        lines.append(f"  {row['kernel'][:110]}")
        for side in SIDES:
            shapes = "; ".join(row[f"{side}_launches"]) or "-"
            lines.append(f"    {side:5}  {row[f'{side}_us']:9.1f} us  launch {shapes}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", help="a BLOCK.json.gz file of benchmarks.models --dump")
    ap.add_argument("--top", type=int, default=15, help="kernels to list (default %(default)s)")
    args = ap.parse_args(argv)
    with gzip.open(args.dump, "rt") as f:
        print(report(json.load(f), args.top))


if __name__ == "__main__":
    main()
