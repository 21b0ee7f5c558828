"""Kernels that Inductor's compile workers build are found in Triton's cache by the
compiling process (``environment.align_triton_ptxas``), not compiled again there.

The workers point Triton at torch's ptxas; a process whose first Triton compile came
before that (autotuning's precompile threads at lowering) keyed every compile on the
bundled ptxas's version for good. Here a second ptxas is a script that reports another
version and runs the bundled one, and the worker is a subprocess that names it, as
Inductor's does (``ptxas_scenario.py``). Compiles target sm_90 (no GPU needed); each
scenario runs in a fresh interpreter, as Triton memoizes the version per process."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

pytest.importorskip("triton.backends.nvidia.compiler")

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def other_ptxas(tmp_path_factory):
    """A ptxas that reports another version and compiles as the bundled one."""
    from triton.backends.nvidia import compiler

    real = os.path.join(os.path.dirname(compiler.__file__), "bin", "ptxas")  # the bundled one
    path = tmp_path_factory.mktemp("ptxas") / "ptxas"
    # Triton picks the PTX version from the reported release: one the real ptxas reads.
    release = (
        "12.8"
        if "release 12.8" not in subprocess.run([real, "--version"], capture_output=True, text=True).stdout
        else "12.7"
    )
    path.write_text(
        f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "Cuda compilation tools, release {release}, '
        f'V{release}.0 (a test)"; exit 0; fi\nexec "{real}" "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def scenario(other: str, align: bool, cache_dir) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_PTXAS_PATH"}
    # Our import installs nothing there: the scenario calls the alignment itself.
    env.update(TRITON_CACHE_DIR=str(cache_dir), PYTHONPATH=os.path.dirname(TESTS), INDUCTOR_CUTEDSL_ENABLED="0")
    out = subprocess.run(
        [sys.executable, os.path.join(TESTS, "ptxas_scenario.py"), "parent", other, "align" if align else "plain"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def keys_sm90_on_ptxas_path() -> bool:
    from inductor_cutedsl.compat.environment import keys_sm90_on_ptxas_path as keyed

    return keyed()


def test_without_alignment_a_workers_kernel_is_compiled_again(other_ptxas, tmp_path):
    (result,) = scenario(other_ptxas, align=False, cache_dir=tmp_path)
    assert result["first"] > 0
    if keys_sm90_on_ptxas_path():  # Triton 3.6 (torch 2.11): Inductor's own behaviour, compiled twice
        assert result["again"] > 0
    else:  # Triton 3.9 (torch 2.15) compiles sm_90 with a ptxas the workers' variable does not name
        assert result["again"] == 0


def test_aligned_process_finds_the_workers_kernel_and_undo_restores(other_ptxas, tmp_path):
    lines = scenario(other_ptxas, align=True, cache_dir=tmp_path)
    result = lines[0]
    assert result["first"] > 0 and result["again"] == 0, result
    if not keys_sm90_on_ptxas_path():
        # Nothing to align: the alignment changes nothing, and the kernel is found anyway.
        assert lines == [result] and not result["undo"] and result["path"] is None
        return
    result, after, realigned = lines
    assert result["undo"] and result["path"] == other_ptxas
    assert after == {"after_undo": None}
    # Aligned again after the undo (enable() after disable()), although torch runs its
    # setter only once: still the workers' ptxas, so the kernel is still found.
    assert realigned == {"realigned": True, "path": other_ptxas, "again": 0}
