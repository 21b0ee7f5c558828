"""The benchmarks' zygote: children forked from a process that has imported torch and
transformers run as fresh processes would for what differs between them (their
environment, arguments, session and output), and what goes wrong in one is reported
as ``json_process`` reports it."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from helpers import gone

from benchmarks import zygote

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys
preloaded = "torch" in sys.modules  # before this module imports anything
import os, subprocess, time
import torch
from inductor_cutedsl.cli.run import print_report_and_exit
if sys.argv[1] == "fail":
    print("the reason", file=sys.stderr, flush=True)
    sys.exit(3)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
if sys.argv[1] == "hang":
    open(sys.argv[2], "w").write(str(worker.pid))
    time.sleep(120)
print("not the report")
print_report_and_exit(
    {
        "preloaded": preloaded,
        "argv": sys.argv[1:],
        "given": os.environ.get("ZYGOTE_TEST_GIVEN"),
        "servers_own": os.environ.get("ZYGOTE_TEST_SERVERS_OWN"),
        "own_session": os.getsid(0) == os.getpid(),
        "cuda_initialized": torch.cuda.is_initialized(),
        "worker": worker.pid,
    }
)
"""


@pytest.fixture
def child_module(tmp_path, monkeypatch):
    (tmp_path / "zygote_test_child.py").write_text(textwrap.dedent(CHILD))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), str(ROOT)])))
    monkeypatch.setenv("ZYGOTE_TEST_SERVERS_OWN", "1")  # the server's environment, not the child's
    return "zygote_test_child"


def test_a_forked_child_runs_with_its_own_environment_arguments_session_and_output(child_module, monkeypatch):
    with zygote.serving():
        assert zygote._server is not None  # torch and transformers imported, nothing unshared
        monkeypatch.delenv("ZYGOTE_TEST_SERVERS_OWN")  # left in the server's environment only
        t0 = time.monotonic()
        report = zygote.process(["-m", child_module, "run", "--flag"], {"ZYGOTE_TEST_GIVEN": "yes"}, 100)
        assert time.monotonic() - t0 < 60  # not held by the worker it left (120 s)
        assert report["preloaded"] and report["argv"] == ["run", "--flag"]
        assert report["given"] == "yes" and report["servers_own"] is None
        assert report["own_session"] and not report["cuda_initialized"]
        assert gone(report["worker"])
        # The next child is another fork, with its own environment.
        again = zygote.process(["-m", child_module, "again"], {"ZYGOTE_TEST_SERVERS_OWN": "2"}, 100)
        assert again["argv"] == ["again"] and again["given"] is None and again["servers_own"] == "2"
    assert zygote._server is None


def test_a_forked_child_that_fails_or_overruns_is_reported_and_the_server_serves_on(child_module, tmp_path):
    pid_file = tmp_path / "worker.pid"
    with zygote.serving():
        with pytest.raises(RuntimeError, match=r"status 3\):\n.*the reason"):
            zygote.process(["-m", child_module, "fail"], {}, 100)
        with pytest.raises(subprocess.TimeoutExpired):
            zygote.process(["-m", child_module, "hang", str(pid_file)], {}, 10)
        assert gone(int(pid_file.read_text()))
        assert zygote.process(["-m", child_module, "run"], {}, 100)["preloaded"]


def test_without_a_server_children_start_as_new_processes(child_module, monkeypatch, capsys):
    def no_server():
        raise RuntimeError("cannot start")

    monkeypatch.setattr(zygote, "Server", no_server)
    with zygote.serving():
        report = zygote.process(["-m", child_module, "run"], {"ZYGOTE_TEST_GIVEN": "yes"}, 100)
    assert not report["preloaded"] and report["given"] == "yes" and report["own_session"]
    assert "children start as new processes (no zygote: cannot start)" in capsys.readouterr().out


def test_the_server_refuses_to_fork_from_imports_that_read_what_children_differ_in():
    """This process has imported Inductor (and our package): the state a forked child
    must not inherit."""
    import torch._inductor  # noqa: F401

    assert "torch._inductor" in (zygote._refusal() or "")


def test_the_zygote_runs_modules_only():
    server = object.__new__(zygote.Server)
    with pytest.raises(ValueError, match="runs modules"):
        server.run(["-c", "print(1)"], {}, 10)


def test_children_not_wanted_forked_start_as_new_processes(child_module):
    from benchmarks import compile as compile_bench

    assert not compile_bench.parser().parse_args(["--no-zygote"]).zygote
    assert compile_bench.parser().parse_args([]).zygote
    with zygote.serving(False):
        assert zygote._server is None
        assert not zygote.process(["-m", child_module, "run"], {}, 100)["preloaded"]
