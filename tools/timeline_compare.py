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
autotuner picked differently).
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


def report(dump: dict, top: int) -> str:
    lines = [f"{dump.get('block')}: GPU timelines, µs over the traced calls"]
    for side in SIDES:
        figures = totals(dump["timelines"].get(side, []))
        lines.append(f"  {side:5}  " + "  ".join(f"{key} {value:10.1f}" for key, value in figures.items()))
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
