"""pytest plugin for ``tools/inductor_tests``, loaded in both modes: each failure
is appended to a JSON-lines file as it happens (``INDUCTOR_TESTS_REPORTS``), so a run cut
short by its time limit still says why its tests failed (junit XML and pytest's summary
are written only when the whole run ends).

Under pytest-xdist only the controller writes: it receives every worker's reports."""

from __future__ import annotations

import json
import os

ENV = "INDUCTOR_TESTS_REPORTS"
HEAD_ERRORS, TAIL_LINES, LINE_CHARS = 30, 8, 300


def excerpt(text: str) -> str:
    """What a failure says, short: pytest's "E" lines from the first (the exception and
    its message, which Inductor's errors put far above the end) and the last lines (where
    it was raised), each cut to ``LINE_CHARS``."""
    lines = text.strip().splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("E ")][:HEAD_ERRORS]
    keep = sorted(set(errors) | set(range(max(0, len(lines) - TAIL_LINES), len(lines))))
    return "\n".join(lines[i][:LINE_CHARS] for i in keep)


def headline(message: str) -> str:
    """The line that names the error: the first "E" line naming an Error or Exception,
    else the first "E" line, else the last line."""
    lines = message.strip().splitlines()
    errors = [line for line in lines if line.startswith("E ")]
    named = [line for line in errors if "Error" in line or "Exception" in line]
    return (named or errors or lines[-1:] or [""])[0]


_path: str | None = None


def pytest_configure(config):
    global _path
    is_worker = hasattr(config, "workerinput")
    _path = None if is_worker else os.environ.get(ENV)


def pytest_runtest_logreport(report):
    if _path is None or not report.failed:  # a failed setup or teardown is an error
        return
    record = {"nodeid": report.nodeid, "when": report.when, "message": excerpt(report.longreprtext)}
    with open(_path, "a") as f:
        f.write(json.dumps(record) + "\n")
