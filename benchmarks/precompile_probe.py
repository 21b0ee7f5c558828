"""Which Triton kernels a cold compile builds where (issue 17): one block's cold compile
in this process, with every Triton compile, every ``CachingAutotuner.precompile`` and
every Inductor precompile function recorded (thread, kernel, seconds, on-disk cache
hit or miss), written as JSON.

    python benchmarks/precompile_probe.py vit:small:inference:max-autotune:ours --json OUT.json

Run it with empty caches (``device_session.sh`` step ``precompile-probe`` does). It
answers why the selection's start sometimes compiles Inductor's Triton template choices
in the compiling thread, at their first benchmark, although Inductor precompiled them
at lowering: a template choice compiled in the compiling thread
(``template_compiles_in_main_thread``) is the slow mode; the ``ptxas`` event says which
ptxas version this process keyed its compiles on (``_compat.align_triton_ptxas``).
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # models.py
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

T0 = time.perf_counter()
EVENTS: list[dict] = []
_LOCK = threading.Lock()


def _record(kind: str, **fields) -> None:
    with _LOCK:
        EVENTS.append({"kind": kind, "t": round(time.perf_counter() - T0, 3), "thread": threading.current_thread().name,
                       **fields})  # fmt: skip


_UNDO: list = []


def _wrap(owner, attr: str, make):
    original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
    setattr(owner, attr, make(getattr(owner, attr)))
    _UNDO.append(lambda: setattr(owner, attr, original))


def _source_file(jit_fn) -> str | None:
    """The generated module a Triton kernel was defined in (which choice or module it is)."""
    code = getattr(getattr(jit_fn, "fn", None), "__code__", None)
    return os.path.basename(code.co_filename) if code is not None else None


def uninstall() -> None:
    """Every hook ``install`` set, removed."""
    while _UNDO:
        _UNDO.pop()()


def install() -> None:
    import triton
    import triton.compiler.compiler as tcc
    from torch._inductor import codecache, select_algorithm
    from torch._inductor.runtime import triton_heuristics as th

    stage_runs = threading.local()  # a compile runs its stages in its own thread

    def compile_hook(original):
        @functools.wraps(original)
        def compile(src, *args, **kwargs):
            name = getattr(getattr(src, "fn", None), "__name__", None) or getattr(src, "name", "?")
            where = _source_file(getattr(src, "fn", None))
            t = time.perf_counter()
            before = getattr(stage_runs, "n", 0)  # a cache hit returns before running any stage
            try:
                return original(src, *args, **kwargs)
            finally:
                _record("triton.compile", kernel=name, file=where, s=round(time.perf_counter() - t, 3),
                        stages_run=getattr(stage_runs, "n", 0) - before)  # fmt: skip

        return compile

    # Count stage runs (a miss runs make_ttir ... make_cubin; a hit none) through the
    # CUDA backend's add_stages, wrapping each stage function.
    from triton.backends.nvidia import compiler as nv

    def add_stages_hook(original):
        @functools.wraps(original)
        def add_stages(self, stages, options, *args, **kwargs):
            original(self, stages, options, *args, **kwargs)
            for key, fn in list(stages.items()):
                def counted(*a, _fn=fn, **k):
                    stage_runs.n = getattr(stage_runs, "n", 0) + 1
                    return _fn(*a, **k)

                stages[key] = counted

        return add_stages

    _wrap(nv.CUDABackend, "add_stages", add_stages_hook)
    _wrap(tcc, "compile", compile_hook)
    _wrap(triton, "compile", compile_hook)

    def precompile_hook(original):
        @functools.wraps(original)
        def precompile(self, *args, **kwargs):
            t = time.perf_counter()
            had = bool(self.compile_results) or bool(self.launchers)
            try:
                return original(self, *args, **kwargs)
            finally:
                _record("precompile", kernel=self.fn.__name__, file=_source_file(self.fn), obj=id(self), had_results=had,
                        warm_cache_only=bool(kwargs.get("warm_cache_only") or (args and args[0])),
                        s=round(time.perf_counter() - t, 3))  # fmt: skip

        return precompile

    _wrap(th.CachingAutotuner, "precompile", precompile_hook)

    def make_precompile_hook(original):
        @functools.wraps(original)
        def make_precompile_fn(self, choices, name, inputs_key, *args, **kwargs):
            from torch._inductor.async_compile import AsyncCompile

            pool = AsyncCompile.use_process_pool()
            fn = original(self, choices, name, inputs_key, *args, **kwargs)
            _record("make_precompile_fn", name=name, choices=len(choices), process_pool=pool,
                    fn=getattr(fn, "__name__", str(fn)), fn_id=id(fn))  # fmt: skip

            @functools.wraps(fn)
            def called(*a, **k):
                t = time.perf_counter()
                out = fn(*a, **k)
                _record("precompile_fn_called", name=name, fn_id=id(fn), s=round(time.perf_counter() - t, 3))
                return out

            return called

        return make_precompile_fn

    _wrap(select_algorithm.AlgorithmSelectorCache, "make_precompile_fn", make_precompile_hook)

    def load_hook(original):
        @functools.wraps(original)
        def load_by_key_path(cls, key, path, linemap=None, attrs=None):
            cached = attrs is None and path in getattr(cls, "modules_no_attr", {})
            mod = original.__func__(cls, key, path, linemap, attrs)
            if not cached:
                _record("module_load", path=os.path.basename(path), mod=id(mod))
            return mod

        return load_by_key_path

    original_load = codecache.PyCodeCache.__dict__["load_by_key_path"]
    codecache.PyCodeCache.load_by_key_path = classmethod(load_hook(original_load))
    _UNDO.append(lambda: setattr(codecache.PyCodeCache, "load_by_key_path", original_load))


def summary(events: list[dict]) -> dict:
    """Compiles that ran their stages (cache misses): how many and their seconds per
    thread kind, the compiling thread's by kernel (name and generated module), and the
    template choices among them (the slow mode this probe looks for)."""
    misses = [e for e in events if e["kind"] == "triton.compile" and e["stages_run"]]
    by_thread: dict = collections.defaultdict(lambda: {"compiles": 0, "s": 0.0})
    main: dict = collections.defaultdict(lambda: {"compiles": 0, "s": 0.0})
    for e in misses:
        rows = [by_thread[e["thread"].rsplit("_", 1)[0]]]  # a pool's threads together
        if e["thread"] == "MainThread":
            rows.append(main[f"{e['kernel']} {e.get('file')}"])
        for row in rows:
            row["compiles"] += 1
            row["s"] = round(row["s"] + e["s"], 3)
    templates = [e for e in misses if e["thread"] == "MainThread" and e["kernel"] == "triton_mm"]
    return {"misses_by_thread": dict(by_thread),
            "main_thread": dict(sorted(main.items(), key=lambda kv: -kv[1]["s"])[:12]),
            "main_thread_miss_s": round(sum(r["s"] for r in main.values()), 2),
            "template_compiles_in_main_thread": len(templates),
            "template_compile_s_in_main_thread": round(sum(e["s"] for e in templates), 2)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", help="FAMILY:SIZE:RUN:MODE:BACKEND, as models.py --compile-once")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    install()
    import models

    ptxas_before = os.environ.get("TRITON_PTXAS_PATH")
    models.compile_once(args.spec)
    # Which ptxas this process keyed its compiles on (_compat.align_triton_ptxas).
    from triton.backends.nvidia.compiler import get_ptxas_version

    _record("ptxas", path_before=ptxas_before, path_after=os.environ.get("TRITON_PTXAS_PATH"),
            version=get_ptxas_version(90).strip().splitlines()[-1])  # fmt: skip
    with open(args.json, "w") as f:
        json.dump({"spec": args.spec, "summary": summary(EVENTS), "events": EVENTS}, f)
    print(json.dumps({"spec": args.spec, "ptxas": EVENTS[-1], **summary(EVENTS)})[:3000])


if __name__ == "__main__":
    main()
