"""pytest plugin for ``benchmarks/inductor_tests.py``, loaded in both modes: each failure
is appended to a JSON-lines file as it happens (``INDUCTOR_TESTS_REPORTS``), so a run cut
short by its time limit still says why its tests failed (junit XML and pytest's summary
are written only when the whole run ends).

Under pytest-xdist only the controller writes: it receives every worker's reports."""
from __future__ import annotations

import json
import os

ENV = "INDUCTOR_TESTS_REPORTS"
TAIL_LINES = 12

_path: str | None = None


def pytest_configure(config):
    global _path
    is_worker = hasattr(config, "workerinput")
    _path = None if is_worker else os.environ.get(ENV)


def pytest_runtest_logreport(report):
    if _path is None or not report.failed:  # a failed setup or teardown is an error
        return
    lines = report.longreprtext.strip().splitlines()[-TAIL_LINES:]
    record = {"nodeid": report.nodeid, "when": report.when,
              "message": "\n".join(line[:300] for line in lines)}  # fmt: skip
    with open(_path, "a") as f:
        f.write(json.dumps(record) + "\n")
