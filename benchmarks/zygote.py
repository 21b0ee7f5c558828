"""Benchmark children forked from a process that has already imported torch and
transformers.

The compile and warm-start benchmarks run every compile in a fresh process, and each
such child spent seconds importing torch and transformers before its compile: device
time that measures nothing, dozens of times per run. ``serving()`` starts one process
(this module's ``__main__``) that imports both and then forks a child per request;
``process()`` runs a child there while one serves, and as a new process
(``json_process``) otherwise.

Rules that keep a forked child a fresh process for what is measured:

* The server imports ``torch`` and ``transformers`` only, and refuses to serve if they
  brought in Dynamo, Inductor, Triton or our package: those read what differs
  between the children (the cache directories, the backend's switch, Triton's ptxas)
  and would hold it from the server's environment.
* CUDA is never initialised in the server (it refuses to serve if it were): a CUDA
  context does not survive a fork.
* A child takes the environment its request names, whole, before it imports anything
  else, starts a session of its own (``end_session`` ends its workers) and writes its
  output to the request's files. Its report's clock starts before the request is sent
  (``compile.STARTED``), so the fork is inside ``start_and_imports``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import runpy
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator

#: What the server imports for its children.
PRELOADED = ("torch", "transformers")
#: What it must not have imported with them (see the module's rules). The client's side of
#: this module imports our package inside its functions: the server runs this module too.
UNSHARED = ("torch._dynamo", "torch._inductor", "triton", "inductor_cutedsl")

_server: Server | None = None


class Server:
    """The forking process, seen from the benchmark: one request at a time."""

    def __init__(self) -> None:
        from inductor_cutedsl.install import launch_environment

        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__],
            env=launch_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, name="zygote-replies", daemon=True).start()
        hello = self._reply(600)
        if not hello.get("ready"):
            self.close()
            raise RuntimeError(f"the zygote does not serve: {hello.get('error')}")

    def _read(self) -> None:
        assert self.proc.stdout is not None  # a pipe, above
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def _reply(self, timeout: float) -> dict:
        line = self.lines.get(timeout=timeout)
        if not line:
            raise RuntimeError(f"the zygote exited with status {self.proc.wait()}")
        return json.loads(line)

    def run(self, args: list[str], env: dict, timeout: float) -> dict:
        """``json_process(args, env, timeout)``, the child forked here."""
        from inductor_cutedsl.cli.run import end_session, report_of
        from inductor_cutedsl.install import launch_environment

        if args[:1] != ["-m"] or len(args) < 2:
            raise ValueError(f"the zygote runs modules (-m NAME ARGS...), not {args!r}")
        with tempfile.TemporaryDirectory(prefix="zygote-") as tmp:
            out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
            request = {"module": args[1], "argv": args[2:], "env": {**launch_environment(), **env}}
            assert self.proc.stdin is not None  # a pipe, above
            self.proc.stdin.write(json.dumps({**request, "stdout": out, "stderr": err}) + "\n")
            self.proc.stdin.flush()
            pid = self._reply(60)["pid"]
            try:
                returncode = self._reply(timeout)["rc"]
            except queue.Empty:
                end_session(pid)
                self._reply(60)  # the server reaps it
                raise subprocess.TimeoutExpired(args, timeout) from None
            end_session(pid)
            with open(out) as o, open(err) as e:
                return report_of(args, returncode, o.read(), e.read())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def serving(wanted: bool = True) -> Iterator[None]:
    """Within: ``process`` forks children from one server (started here, closed on
    exit). Where the server cannot start, or is not ``wanted``, children start as new
    processes, and that is said."""
    global _server
    _server = None
    try:
        if wanted:
            _server = Server()
    except (OSError, RuntimeError, queue.Empty) as e:
        print(f"children start as new processes (no zygote: {e})", flush=True)
    try:
        yield
    finally:
        server, _server = _server, None
        if server is not None:
            server.close()


def process(args: list[str], env: dict, timeout: float) -> dict:
    """A child's report: forked from the server while one serves, else ``json_process``."""
    if _server is None:
        from inductor_cutedsl.cli.run import json_process

        return json_process(args, env, timeout)
    return _server.run(args, env, timeout)


# ---------------------------------------------------------------------------------------
# The server


def _child(request: dict) -> int:
    """In a forked child: become the request's process and run its module; the status."""
    os.setsid()
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin.close()
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["argv"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    return 0


def _refusal() -> str | None:
    """Why the imports leave nothing safe to fork from, or None."""
    import torch

    shared = [name for name in UNSHARED if name in sys.modules]
    if shared:
        return f"importing {', '.join(PRELOADED)} brought in {', '.join(shared)}"
    if torch.cuda.is_initialized():
        return "CUDA is initialised"
    return None


def serve() -> None:
    import importlib

    try:
        for name in PRELOADED:
            importlib.import_module(name)
        refusal = _refusal()
    except ImportError as e:
        refusal = f"cannot import: {e}"
    print(json.dumps({"ready": refusal is None, "error": refusal}), flush=True)
    if refusal is not None:
        return
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(_child(request))
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve()
