"""In a process that compiles several graphs, what Inductor's compile subprocesses
build for a later graph is found by the compiling process, not compiled again there,
also after ``disable()`` and ``enable()`` between the graphs (the ptxas alignment
redone: torch runs its own setter only once per process). The real compile
subprocesses of the installed torch build one of Inductor's own ``mm`` template
choices for sm_90 (no GPU: ``pool_site/``); the compiling process then compiles it as
its first benchmark does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton.backends.nvidia.compiler")

TESTS = os.path.dirname(os.path.abspath(__file__))


def test_subprocess_builds_are_found_after_disable_and_enable(tmp_path):
    import torch

    if not os.path.isfile(os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas")):
        pytest.skip("this torch ships no ptxas: its compile subprocesses use Triton's, as this process does")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_PTXAS_PATH", "INDUCTOR_CUTEDSL_ENABLED")}
    env.update(
        POOL_SCENARIO_FAKE_GPU="1",
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
        INDUCTOR_CUTEDSL_CACHE_DIR=str(tmp_path / "ours"),
        TORCHINDUCTOR_COMPILE_THREADS="2",
        PYTHONPATH=os.pathsep.join([os.path.join(TESTS, "pool_site"), TESTS, os.path.dirname(TESTS)]),
    )
    out = subprocess.run(
        [sys.executable, os.path.join(TESTS, "pool_scenario.py")], env=env, capture_output=True, text=True, timeout=900
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    result = json.loads(lines[-1])
    assert result["ptxas"] == os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas"), result
    assert result["stages"] == 0, result  # found: not compiled again in the compiling process
