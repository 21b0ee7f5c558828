"""Settings from the environment, the command line's checks, and refused arguments."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )


def test_disabled_by_the_environment_is_not_installed():
    done = run_python("import inductor_cutedsl; print(inductor_cutedsl.is_enabled())", INDUCTOR_CUTEDSL_ENABLED="0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("value", ["abc", "0"])
def test_a_bad_number_names_its_variable(value):
    done = run_python("import inductor_cutedsl", INDUCTOR_CUTEDSL_MAX_CONFIGS=value)
    assert done.returncode != 0
    assert f"INDUCTOR_CUTEDSL_MAX_CONFIGS={value!r}" in done.stderr


@pytest.mark.parametrize("argv", [["--tokens", "0"], ["--tokens", "-5"], ["--workers", "-1"]])
def test_command_line_refuses_non_positive_counts(argv, capsys):
    from inductor_cutedsl.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "positive" in capsys.readouterr().err


@pytest.mark.parametrize("a,b", [([1.0], torch.ones(8, 8)), (torch.ones(8, 8), None)], ids=["list", "none"])
def test_gemm_refuses_what_is_not_a_tensor(a, b):
    from inductor_cutedsl.runtime import gemm

    with pytest.raises(ValueError, match="not a tensor"):
        gemm(a, b)


def test_precompile_into_an_unwritable_cache_fails(monkeypatch, tmp_path):
    """Ahead-of-time compiles that no later process could find must not report success."""
    from inductor_cutedsl.cli import precompile
    from inductor_cutedsl.cli.block import BlockSize
    from inductor_cutedsl.runtime import KernelCache

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(precompile, "default_cache", lambda: KernelCache(blocker / "cache"))
    with pytest.raises(SystemExit, match="cannot take new kernels.*Not a directory.*are missing"):
        precompile.precompile_block(BlockSize(), workers=1)


def test_precompile_with_a_read_only_cache_that_holds_every_kernel_succeeds(monkeypatch, tmp_path, capsys):
    """A warm cache mounted read-only serves the main job: nothing needs building, exit 0."""
    from inductor_cutedsl.cli import precompile
    from inductor_cutedsl.cli.block import BlockSize
    from inductor_cutedsl.runtime import KernelCache

    warm = tmp_path / "warm"
    specs = precompile.block_specs(BlockSize())

    def fake_build(out_dir, name):
        (out_dir / f"{name}.o").write_bytes(b"object")

    for spec in specs:
        KernelCache(warm).get_or_build(spec.key(), fake_build)
    monkeypatch.setattr(precompile, "default_cache", lambda: KernelCache(warm, writable=False))
    monkeypatch.setattr(precompile, "build_with_progress", lambda *a, **k: pytest.fail("nothing to build"))
    precompile.precompile_block(BlockSize(), workers=1)
    assert f"all {len(specs)} kernels for the block's GEMMs are cached" in capsys.readouterr().out


def test_json_and_png_on_a_machine_without_a_gpu_say_why_nothing_was_written(monkeypatch, capsys, tmp_path):
    from inductor_cutedsl.cli import main as cli
    from inductor_cutedsl.cli import precompile

    monkeypatch.setattr(cli, "gpu_reason", lambda: "no CUDA GPU on this machine")
    monkeypatch.setattr(precompile, "precompile_block", lambda size, workers: None)
    cli.main(["--json", str(tmp_path / "r.json"), "--png", str(tmp_path / "r.png")])
    out = capsys.readouterr().out
    assert f"--json {tmp_path / 'r.json'}: nothing written (the results need a Hopper GPU)" in out
    assert f"--png {tmp_path / 'r.png'}: nothing written" in out
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("workers,says", [(1, "1 worker\n"), (3, "3 workers\n")])
def test_precompile_counts_its_workers_in_words(monkeypatch, capsys, tmp_path, workers, says):
    from inductor_cutedsl.cli import precompile
    from inductor_cutedsl.cli.block import BlockSize
    from inductor_cutedsl.runtime import KernelCache

    monkeypatch.setattr(precompile, "default_cache", lambda: KernelCache(tmp_path / "cache"))
    monkeypatch.setattr(precompile, "build_with_progress", lambda specs, cache, workers, out: {})
    precompile.precompile_block(BlockSize(), workers=workers)
    assert says in capsys.readouterr().out


def test_compile_workers_leave_no_open_pipe_behind(tmp_path):
    """Stopping the worker pool closes both of each worker's pipes: no ResourceWarning at exit."""
    code = (
        "import inductor_cutedsl\nfrom inductor_cutedsl.runtime import workers\npool = workers.pool(2)\npool.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "always::ResourceWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
