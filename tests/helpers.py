"""Input builders and checks shared by the tests."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import torch

#: The package's sources, which some tests read (what the code names, not what it does).
PACKAGE = Path(__file__).resolve().parents[1] / "inductor_cutedsl"


def package_trees() -> Iterator[tuple[Path, ast.Module]]:
    """Each source file of the package, parsed, in name order."""
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def calls_of(tree: ast.AST, name: str) -> Iterator[ast.Call]:
    """The calls in ``tree`` of the bare name ``name``."""
    return (n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name)


def matrix(rows: int, cols: int, major_last: bool, dtype, batch: int | None = None, device="cuda"):
    """Fresh randn matrix (rows x cols), row-major if ``major_last`` else column-major."""
    lead = () if batch is None else (batch,)
    if major_last:
        return torch.randn(*lead, rows, cols, device=device).to(dtype)
    return torch.randn(*lead, cols, rows, device=device).to(dtype).transpose(-1, -2)


def poisoned(shape, dtype, device="cuda"):
    """An output buffer full of NaN, so an unwritten element fails the check."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius-norm error against a float64 reference; NaN never passes."""
    out64 = out.double()
    if not torch.isfinite(out64).all():
        return float("inf")
    return ((out64 - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def cutedsl_launches(code: str) -> int:
    """CuteDSL kernel launches in Inductor's generated wrapper code. Counted at the
    call sites: GEMMs that share a config render the same source, defined once."""
    return len(re.findall(r"^\s+cutedsl_\w+\.run\(", code, flags=re.M))


class _Translated(Exception):
    """Raised once the scheduler nodes are translated: the C++ build that would follow
    is not needed."""


def translate_inductor(fn, *args, keep_all: bool = False) -> dict:
    """Compile ``fn`` for the CPU with Inductor and translate its scheduler nodes as the
    epilogue of a GEMM whose output is ``args[0]`` (an (M, N) matrix): ``{"t": the
    Translation, "outputs": the graph's output buffers in order}``, or ``{"refused": the
    reason}``. ``keep_all``: every buffer the nodes
    store is kept (an ``out`` operand), so that one graph checks many results at once.
    Compilation stops at Inductor's code generation, before any C++ is built."""
    from unittest import mock

    from torch._inductor import config as inductor_config
    from torch._inductor import scheduler as inductor_scheduler
    from torch._inductor.virtualized import V

    from inductor_cutedsl.errors import Unsupported
    from inductor_cutedsl.scheduler.node_translation import translate_nodes

    out: dict = {}
    m, n = args[0].shape

    def codegen(self):
        nodes = [leaf for node in self.nodes for leaf in node.get_nodes()]
        try:
            out["t"] = translate_nodes("arg0_1", (m, n, 1), nodes, V.graph.get_dtype, keep_if=lambda buffer: keep_all)
        except Unsupported as exc:
            out["refused"] = str(exc)
        out["outputs"] = list(V.graph.get_output_names())
        raise _Translated()

    torch.compiler.reset()
    with (
        mock.patch.object(inductor_scheduler.Scheduler, "codegen", codegen),
        inductor_config.patch(force_disable_caches=True),
    ):
        try:
            torch.compile(fn)(*args)
        except Exception as exc:
            if not out or "_Translated" not in repr(exc) and not isinstance(exc.__cause__, _Translated):
                raise
    assert out, "Inductor did not schedule the graph"
    return out


def translated_values(t, acc: torch.Tensor, inputs: dict, dtype=torch.float64) -> dict:
    """What the translated epilogue ``t`` computes (``runtime.reference``, in ``dtype``)
    with ``acc`` (an (M, N) matrix) as the GEMM's accumulator and ``inputs`` the tensors of
    the buffers it reads, by name, each read through the view the translation found: the
    (M, N) values of each buffer the epilogue writes (its result and the kept ones), by
    buffer name."""
    from inductor_cutedsl.runtime import reference

    m, n = acc.shape
    flat = {name: t.to(dtype).flatten() for name, t in inputs.items()}
    reads = [op for op, decl in zip(t.operands, t.epilogue.operands, strict=True) if not decl.is_output]
    ops = [
        flat[op.buffer].as_strided((1, m, n), (op.strides[2], op.strides[0], op.strides[1]), op.offset) for op in reads
    ]
    coords = (torch.arange(m).view(1, m, 1), torch.arange(n).view(1, 1, n), torch.zeros(1, 1, 1, dtype=torch.long))
    result = reference.evaluate(t.epilogue, acc.to(dtype).view(1, m, n), *coords, ops, dtype)
    values = result if t.kept else (result,)
    assert len(values) == 1 + len(t.kept), "one value per written buffer"
    return {
        name: torch.as_tensor(v, dtype=dtype).broadcast_to(1, m, n).reshape(m, n)
        for name, v in zip((t.outputs[-1], *t.kept), values, strict=True)
    }


def graph_inputs(*args) -> dict:
    """Inductor's names for a compiled graph's inputs: ``arg{i}_1``."""
    return {f"arg{i}_1": a for i, a in enumerate(args)}


class RaceLog:
    """What processes racing on one kernel cache did, in the order it happened: one line
    per event appended to one file (an append of a short line is atomic), so the order of
    the lines is the order of the events across processes, without reading a clock.

    ``install`` logs, in the calling process, each wait for a key's lock (``wait``), each
    time the lock is held (``got``), and each build (``build``, then ``built`` or
    ``failed``)."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def write(self, event: str, key: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()} {event} {key}\n")

    def events(self) -> list[tuple[int, str, str]]:
        """(pid, event, key) per line, in order."""
        try:
            with open(self.path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        return [(int(pid), event, key) for pid, event, key in (line.split(" ", 2) for line in lines)]

    def install(self, hold: int = 0, hold_timeout_s: float = 600.0) -> None:
        """Log this process's cache events. ``hold``: the first build of the run (of any
        process) finishes only once ``hold`` other processes wait for its key's lock, so
        that they demonstrably raced with it (``hold_timeout_s`` only guards a hang)."""
        from inductor_cutedsl.runtime import cache as cache_mod

        if getattr(cache_mod._key_lock, "race_log", None) is not None:
            return  # a pool process running a second task
        real_lock, real_build, log = cache_mod._key_lock, cache_mod.KernelCache._build_entry, self

        @contextlib.contextmanager
        def key_lock(path, what, timeout=cache_mod.LOCK_TIMEOUT_S):
            key = Path(path).stem
            log.write("wait", key)
            with real_lock(path, what, timeout):
                log.write("got", key)
                yield

        def build_entry(cache, key, build):
            log.write("build", key)
            if hold and next(e for e in log.events() if e[1] == "build") == (os.getpid(), "build", key):
                deadline = time.monotonic() + hold_timeout_s
                while len(log.waiting(key) - {os.getpid()}) < hold:
                    others = {pid for pid, event, k in log.events() if event == "build" and k == key} - {os.getpid()}
                    if others:
                        raise RuntimeError(f"processes {sorted(others)} built {key} while this one held its lock")
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{len(log.waiting(key))} processes came to wait for {key}, not {hold}")
                    time.sleep(0.02)
            try:
                real_build(cache, key, build)
            except BaseException:
                log.write("failed", key)
                raise
            log.write("built", key)

        key_lock.race_log = self
        cache_mod._key_lock = key_lock
        cache_mod.KernelCache._build_entry = build_entry

    def waiting(self, key: str) -> set[int]:
        """The processes that have asked for ``key``'s lock so far."""
        return {pid for pid, event, k in self.events() if event == "wait" and k == key}

    def raced(self, key: str) -> tuple[int, set[int]]:
        """(the process that first built ``key``, the other processes that asked for its
        lock while that build ran and got it only after)."""
        events = self.events()
        start = next(i for i, (_, event, k) in enumerate(events) if event == "build" and k == key)
        builder = events[start][0]
        end = next(
            i
            for i, (pid, event, k) in enumerate(events)
            if i > start and pid == builder and k == key and event in ("built", "failed")
        )
        asked = {pid for pid, event, k in events[:end] if event == "wait" and k == key and pid != builder}
        held_after = {pid for pid, event, k in events[end:] if event == "got" and k == key}
        return builder, asked & held_after


ROOT = Path(__file__).resolve().parents[1]


def fresh_json(code: str, timeout: float = 300, **env: str) -> dict:
    """``code`` (dedented) run in a fresh interpreter from the repository root, with the
    repository on its path and ``env`` added: the JSON its last line prints. For what a
    test process cannot show itself (which modules a process imports, a first load)."""
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    cmd = [sys.executable, "-c", textwrap.dedent(code)]
    done = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (a zombie counts: it runs nothing) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def record_specs(directory: str):
    """Write every kernel spec this process keys (each once, as ``KernelSpec.to_json``
    lines in ``directory/specs-<pid>.jsonl``): a build or a cache lookup keys its spec
    first. ``tools/gpu_run.sh`` sets it for the GPU suite, so that the kernels it carries
    between calls can be built again, on a machine without a GPU, after a kernel change
    (``tools/rebuild_kernels.py``). Returns the function that stops it."""
    from inductor_cutedsl.runtime.spec import KernelSpec

    key = KernelSpec.key
    seen: set[str] = set()
    path = Path(directory) / f"specs-{os.getpid()}.jsonl"

    def recording_key(self) -> str:
        k = key(self)
        if k not in seen:
            seen.add(k)
            with open(path, "a") as f:
                f.write(self.to_json() + "\n")
        return k

    KernelSpec.key = recording_key  # type: ignore[method-assign]

    def stop() -> None:
        KernelSpec.key = key  # type: ignore[method-assign]

    return stop
