"""The command line: its help, what it refuses, what it loads before parsing, and what it
prints (no GPU needed; the jobs themselves are faked)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import gone

from inductor_cutedsl.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
HELP_EXTRA_S = 0.5  # CPU seconds --help may add to `import torch`


def _python(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_every_option_has_help_with_its_default_and_no_markup():
    ap = cli.parser("inductor-cutedsl")
    for action in ap._actions:
        if action.dest == "help":
            continue
        assert action.help, action.dest
        if action.option_strings and action.nargs != 0:  # takes a value: its default is said
            assert "default" in action.help, action.dest
    text = ap.format_help()
    assert "``" not in text and ":func:" not in text and "inductor-cutedsl" in text


def test_the_default_token_count_is_the_blocks():
    from inductor_cutedsl.cli.block import BlockSize

    assert BlockSize().tokens == cli.DEFAULT_TOKENS


def test_help_loads_only_what_the_package_import_does():
    """Nothing of the jobs, Inductor or the DSL loads before the arguments are parsed."""
    code = textwrap.dedent("""
        import json, runpy, sys
        if sys.argv[1] == "help":
            sys.argv = ["__main__.py", "--help"]
            try:
                runpy.run_module("inductor_cutedsl", run_name="__main__", alter_sys=True)
            except SystemExit:
                pass
        else:
            import inductor_cutedsl
        print(json.dumps(sorted(sys.modules)))
    """)
    loaded = {}
    for what in ("help", "import"):
        done = _python("-c", code, what)
        assert done.returncode == 0, done.stderr
        loaded[what] = set(json.loads(done.stdout.strip().splitlines()[-1]))
    parsing = {"inductor_cutedsl.__main__", "inductor_cutedsl.cli", "inductor_cutedsl.cli.main", "runpy", "pkgutil"}
    assert loaded["help"] - loaded["import"] <= parsing
    assert not {"torch._inductor", "torch._dynamo", "cutlass", "matplotlib"} & loaded["help"]


def test_help_costs_no_more_than_importing_torch():
    """What `--help` costs on top of `import torch`, in CPU seconds, measured inside a
    fresh interpreter that has imported torch (the median of three): two interpreters'
    whole imports differ by more than the limit between runs on a shared 2-core box
    (CI read `import torch` at 2.27-3.37 s and `--help` at 2.38-3.32 s in one run)."""
    code = textwrap.dedent("""
        import resource, runpy, sys
        import torch

        def cpu():
            usage = resource.getrusage(resource.RUSAGE_SELF)
            return usage.ru_utime + usage.ru_stime

        t0 = cpu()
        sys.argv = ["inductor_cutedsl", "--help"]
        try:
            runpy.run_module("inductor_cutedsl", run_name="__main__", alter_sys=True)
        except SystemExit:
            pass
        print("extra", cpu() - t0)
    """)
    extra = []
    for _ in range(3):
        done = _python("-c", code)
        assert done.returncode == 0 and "usage:" in done.stdout, done.stderr
        extra.append(float(done.stdout.strip().splitlines()[-1].split()[1]))
    assert statistics.median(extra) <= HELP_EXTRA_S, extra


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tokens", "abc"], "not a whole number"),
        (["--tokens", "0"], "not a positive whole number"),
        (["--workers", "-1"], "not a positive whole number"),
        (["--png", "plot.jpg"], "does not end in .png"),
        (["--json", "results.txt"], "does not end in .json"),
        (["--suite"], "unrecognized arguments: --suite"),
        (["--gemm-bench"], "unrecognized arguments: --gemm-bench"),
    ],
)
def test_invalid_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_an_existing_directory_is_no_output_file(tmp_path, capsys):
    (tmp_path / "out.json").mkdir()
    with pytest.raises(SystemExit):
        cli.main(["--json", str(tmp_path / "out.json")])
    assert "is a directory" in capsys.readouterr().err


def test_main_job_steps_are_numbered(capsys):
    from inductor_cutedsl.cli.run import steps

    step = steps(2)
    step("first")
    step("second")
    assert capsys.readouterr().out.splitlines() == ["[1/2] first", "[2/2] second"]


class _Spec:
    def __init__(self, name: str) -> None:
        self.name = name

    def describe(self) -> str:
        return self.name


def test_kernel_builds_report_each_kernel_compiled_as_i_of_n(monkeypatch):
    from inductor_cutedsl.cli import precompile
    from inductor_cutedsl.runtime import compiler

    def build_async(spec, cache, workers):
        future = concurrent.futures.Future()
        if spec.name == "bad":
            future.set_exception(RuntimeError("ptxas"))
        else:
            future.set_result((Path(spec.name), spec.name != "hit", 1.25))
        return future

    monkeypatch.setattr(compiler, "build_async", build_async)
    lines: list[str] = []
    specs = [_Spec("a"), _Spec("hit"), _Spec("b")]
    built = precompile.build_with_progress(specs, cache=None, workers=1, out=lines.append)
    assert lines == ["  [1/3] a: compiled in 1.2s", "  [3/3] b: compiled in 1.2s"]
    assert [now for _, now, _ in built.values()] == [True, False, True]
    lines.clear()
    with pytest.raises(RuntimeError, match="ptxas"):
        precompile.build_with_progress([_Spec("bad")], cache=None, workers=1, out=lines.append)
    assert lines == ["  [1/1] bad: failed (RuntimeError)"]


def test_a_child_report_comes_back_without_waiting_for_the_workers_it_leaves(monkeypatch):
    """A measured child's compile workers inherit its output and outlive it: the parent
    reads the report once the child has exited, not once the last worker lets go of the
    output, and ends what the child left (a pipe held the parent until a worker's exit,
    seconds per benchmark child)."""
    from inductor_cutedsl.cli.run import json_process

    child = textwrap.dedent(
        """
        import subprocess, sys
        from inductor_cutedsl.cli.run import print_report_and_exit
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print("not the report")
        print_report_and_exit({"worker": worker.pid})
        """
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    t0 = time.monotonic()
    report = json_process(["-c", child], {}, timeout=100)
    assert time.monotonic() - t0 < 60
    assert gone(report["worker"])


def test_a_failed_or_overdue_child_raises_and_leaves_nothing_running(monkeypatch, tmp_path):
    from inductor_cutedsl.cli.run import json_process

    pid_file = tmp_path / "worker.pid"
    child = textwrap.dedent(
        f"""
        import subprocess, sys, time
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pid_file)!r}, "w").write(str(worker.pid))
        print("the reason", file=sys.stderr, flush=True)
        sys.exit(3) if sys.argv[1] == "fail" else time.sleep(120)
        """
    )
    with pytest.raises(RuntimeError, match="the reason"):
        json_process(["-c", child, "fail"], {})
    assert gone(int(pid_file.read_text()))
    with pytest.raises(subprocess.TimeoutExpired):
        json_process(["-c", child, "hang"], {}, timeout=5)
    assert gone(int(pid_file.read_text()))
