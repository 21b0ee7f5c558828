"""Where one thread's wall time goes, by sampling its Python stack.

cProfile counts CPU time per function in every thread and charges a thread waiting for
the GIL to the function it waits in, so a stretch of seconds in which the compiling
thread *waits* (for a future, a lock, a subprocess) hides among the other threads'
work. This samples one thread's stack every ``interval`` seconds of wall time and
reports the stretches it spent in one place, longest first, with the stack, and the
functions on the stack the longest (inclusive wall seconds).

    with WallSampler() as sampler:
        compile_and_run()
    print(sampler.report())

``benchmarks.compile --sample PATH`` samples each child's compile so; the seconds of
chosen frames in each compile it sampled:

    python -m benchmarks.wall_sampler PATH.folded.gz --frames selection.py:decide,graph.py:run
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

Frame = str  # "file.py:function"


def _frames(frame: Any, depth: int) -> tuple[Frame, ...]:
    """The stack from ``frame`` outwards, innermost first, at most ``depth`` frames."""
    out = []
    while frame is not None and len(out) < depth:
        out.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}")
        frame = frame.f_back
    return tuple(out)


class WallSampler:
    """Samples the stack of the thread that enters it (or ``thread_id``) from a daemon
    thread. ``depth``: frames kept per sample, innermost first; ``key_frames``: how many
    innermost frames make two samples "the same place" for the stretches. ``events``:
    {name: condition}, each checked at every sample; ``seen`` gets the seconds at which
    each first held (a pool becoming ready, say)."""

    def __init__(
        self,
        interval: float = 0.05,
        depth: int = 40,
        key_frames: int = 6,
        thread_id: int | None = None,
        events: dict[str, Callable[[], bool]] | None = None,
    ) -> None:
        self.interval, self.depth, self.key_frames = interval, depth, key_frames
        self.thread_id = thread_id
        self.events = dict(events or {})
        self.seen: dict[str, float] = {}
        self.samples: list[tuple[float, tuple[Frame, ...]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def __enter__(self) -> WallSampler:
        self.thread_id = self.thread_id or threading.get_ident()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="wall_sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            t = time.perf_counter() - self._t0
            frame = sys._current_frames().get(self.thread_id)
            if frame is not None:
                self.samples.append((t, _frames(frame, self.depth)))
            del frame
            for name, condition in list(self.events.items()):
                if condition():
                    self.seen[name] = round(t, 2)
                    del self.events[name]

    def stretches(self, min_s: float = 0.5) -> list[dict]:
        """Runs of consecutive samples at one place (the same ``key_frames`` innermost
        frames) lasting at least ``min_s``, longest first: start, seconds, stack."""
        runs: list[dict] = []
        for t, stack in self.samples:
            key = stack[: self.key_frames]
            if runs and runs[-1]["key"] == key:
                runs[-1]["end"] = t
            else:
                runs.append({"key": key, "start": t, "end": t, "stack": stack})
        out = [
            {
                "start_s": round(r["start"], 2),
                "seconds": round(r["end"] - r["start"] + self.interval, 2),
                "stack": list(r["stack"]),
            }
            for r in runs
            if r["end"] - r["start"] + self.interval >= min_s
        ]
        return sorted(out, key=lambda r: -r["seconds"])

    def inclusive(self, top: int = 40) -> list[tuple[Frame, float]]:
        """The functions on the stack the longest (wall seconds, each counted once per sample)."""
        counts: collections.Counter = collections.Counter()
        for _, stack in self.samples:
            counts.update(set(stack))
        return [(f, round(n * self.interval, 2)) for f, n in counts.most_common(top)]

    def folded(self) -> str:
        """Every sample in the flame-graph tools' folded format: one line per distinct
        stack, outermost frame first, ";"-joined, then how many samples had it."""
        counts = collections.Counter(";".join(reversed(stack)) for _, stack in self.samples)
        return "".join(f"{stack} {n}\n" for stack, n in counts.most_common())

    def report(self, stretches: int = 12, top: int = 40) -> str:
        """Text: the longest stretches, with their stacks, then the inclusive table."""
        lines = [f"{len(self.samples)} samples every {self.interval * 1e3:.0f} ms of one thread's wall time"]
        lines += [f"{name} at {t:.2f} s" for name, t in self.seen.items()]
        lines += [f"{name}: not seen" for name in self.events]
        for r in self.stretches()[:stretches]:
            lines.append(f"\n{r['seconds']:.2f} s from {r['start_s']:.2f} s:")
            lines += [f"    {f}" for f in r["stack"]]
        lines.append("\ninclusive wall seconds:")
        lines += [f"{s:8.2f}  {f}" for f, s in self.inclusive(top)]
        return "\n".join(lines) + "\n"

    def append_to(self, path: str, title: str) -> None:
        """This compile's report appended to ``path`` and its folded stacks to
        ``path``.folded.gz (a gzip member each, headed ``=== TITLE``: ``read_folded``)."""
        import gzip

        header = f"=== {title}\n"
        with open(path, "a") as f:
            f.write(f"{header}{self.report()}\n")
        with gzip.open(f"{path}.folded.gz", "at") as f:
            f.write(header + self.folded())


def read_folded(path: str) -> list[tuple[str, collections.Counter]]:
    """The compiles of a ``.folded.gz`` file (one gzip member each, headed by a line
    ``=== SPEC: SECONDS s``): [(header, {stack: samples})]."""
    import gzip

    compiles: list[tuple[str, collections.Counter]] = []
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith("=== "):
                compiles.append((line[4:].strip(), collections.Counter()))
            elif line.strip():
                stack, count = line.rstrip("\n").rsplit(" ", 1)
                compiles[-1][1][stack] += int(count)
    return compiles


def frame_seconds(stacks: collections.Counter, frames: list[Frame], interval: float = 0.05) -> dict[Frame, float]:
    """Inclusive wall seconds of each of ``frames`` in one compile's folded stacks."""
    out = dict.fromkeys(frames, 0.0)
    for stack, count in stacks.items():
        on = set(stack.split(";"))
        for frame in frames:
            if frame in on:
                out[frame] += count * interval
    return {f: round(s, 2) for f, s in out.items()}


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Inclusive wall seconds of frames in each compile of a .folded.gz file")
    ap.add_argument("folded", help="the file --sample wrote beside its report (PATH.folded.gz)")
    ap.add_argument(
        "--frames", required=True, help="comma-separated frames as the samples name them, e.g. selection.py:decide"
    )
    ap.add_argument("--interval", type=float, default=0.05, help="seconds per sample (default: %(default)s)")
    args = ap.parse_args(argv)
    frames = [f for f in args.frames.split(",") if f]
    compiles = read_folded(args.folded)
    width = max(map(len, frames))
    print(" " * width, *(f"{head.rsplit(':', 2)[-2][:12]:>12}" for head, _ in compiles))
    print(" " * width, *(f"{head.rsplit(':', 1)[-1].strip():>12}" for head, _ in compiles))
    table = [frame_seconds(stacks, frames, args.interval) for _, stacks in compiles]
    for frame in frames:
        print(frame.ljust(width), *(f"{row[frame]:12.2f}" for row in table))


if __name__ == "__main__":
    main()
