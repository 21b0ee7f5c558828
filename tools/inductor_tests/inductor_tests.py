"""Inductor's own GEMM tests, stock and with the CuteDSL backend on, compared test by test.

    python -m tools.inductor_tests --tests .device/inductor_tests --json $OUT/inductor-tests.json

``--tests`` holds PyTorch's ``test/inductor/test_max_autotune.py`` and
``test_select_algorithm.py`` from the torch release that runs them (they are PyTorch's
code: never committed; a ``_deps/`` folder beside them, if any, goes on ``PYTHONPATH``
for their test-only dependencies such as ``expecttest``). Each mode runs pytest
(pytest-xdist ``-n``) in its own process with its own Inductor cache:

* ``stock``: plain Inductor;
* ``ours``: ``inductor_tests_plugin.py`` (beside this file) loaded with ``-p``: it imports
  ``inductor_cutedsl`` and keeps ``CUTEDSL`` in every value a test gives
  ``max_autotune_gemm_backends``.

The JSON has, per mode, the counts (passed / failed / skipped / error / xfailed /
xpassed) and every test's outcome, with the last lines of each failure
(``inductor_tests_reporter.py``, loaded in both modes, records them as they happen).
``regressions`` lists the tests that pass stock and fail ours, except those whose failure
``inductor_tests_expected.json`` explains (``expected_differences``: tests asserting which
kernel won, which ours winning a GEMM fails by design; an entry matches only a failure
that says what it names) and those that passed ours in another joined run
(``flaky_ours``). Modes can be run in separate calls
(``--mode stock``, ``--mode ours``) and joined with ``--merge a.json b.json``, or at the
same time (``--together``). Each mode has its own time limit (``--budget``); a mode cut
short keeps the outcomes pytest printed so far, and only tests with an outcome in both
modes are compared. ``--resume earlier.json`` goes on from there: each mode runs only
the tests without an outcome yet, so a full comparison can take several device calls.

Without a CUDA GPU it says so and exits 0 (Inductor's GPU tests skip there);
``--cpu`` runs anyway, to check the mechanics.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

from .inductor_tests_reporter import ENV as REPORTS_ENV
from .inductor_tests_reporter import excerpt, headline

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_FILES = ("test_max_autotune.py", "test_select_algorithm.py")
MODES = ("stock", "ours")
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
# `-v` under xdist: "[gw3] [ 12%] PASSED test_x.py::Cls::test_y"; without xdist:
# "test_x.py::Cls::test_y PASSED [ 12%]".
_XDIST_LINE = re.compile(r"^\[gw\d+\]\s+(?:\[\s*\d+%\]\s+)?([A-Z]+)\s+(\S+::\S+)")
_PLAIN_LINE = re.compile(r"^(\S+::\S+)\s+([A-Z]+)\b")
_WORDS = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "xfailed",
    "XPASS": "xpassed",
}
EXPECTED = HERE / "inductor_tests_expected.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tools.inductor_tests",
        description="Inductor's own GEMM tests, stock vs with the CuteDSL backend.",
    )
    p.add_argument(
        "--tests",
        type=Path,
        default=REPO / ".device" / "inductor_tests",
        help="folder with PyTorch's test files (default: %(default)s)",
    )
    p.add_argument(
        "--files", nargs="+", default=list(DEFAULT_FILES), help="test files in --tests to run (default: %(default)s)"
    )
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    p.add_argument("--mode", choices=("both", *MODES), default="both", help="which runs to make (default: %(default)s)")
    p.add_argument(
        "-n",
        "--workers",
        type=int,
        default=8,
        help="pytest-xdist workers; 0 runs in one process (default: %(default)s)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=270.0,
        help="seconds each mode may run before it is cut short (default: %(default)s)",
    )
    p.add_argument("--json", type=Path, default=None, help="where to write the results")
    p.add_argument("--logs", type=Path, default=None, help="folder for each mode's pytest log (default: beside --json)")
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="an earlier --json of these files: each mode runs only the tests that "
        "have no outcome there yet, and the results join its outcomes",
    )
    p.add_argument(
        "--together",
        action="store_true",
        help="run the modes at the same time (each with -n workers): outcomes do "
        "not depend on timing, and a device call holds both",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        help="join earlier --json files instead of running: later files' outcomes "
        "win, and each test keeps every outcome it had (a rerun of failures "
        "shows flaky tests)",
    )
    p.add_argument(
        "--expected",
        type=Path,
        default=EXPECTED,
        help="reviewed differences: failures that assert which kernel won (default: %(default)s)",
    )
    p.add_argument("--cpu", action="store_true", help="run even without a CUDA GPU")
    args = p.parse_args(argv)
    if args.workers < 0:
        p.error("--workers must be 0 or more")
    if args.budget <= 0:
        p.error("--budget must be positive")
    return args


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_command(args: argparse.Namespace, mode: str, junit: Path, ini: Path, done: Iterable[str] = ()) -> list[str]:
    """The mode's pytest command line; ``done``: test ids (``file.py::Class::test``, the
    rootdir being ``--tests``) left out because they already have an outcome."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *[str(args.tests / f) for f in args.files],
        "-c",
        str(ini),
        "--rootdir",
        str(args.tests),
        "-p",
        "no:cacheprovider",
        "-v",
        "-rN",
        "--tb=short",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit1",
        "-p",
        "inductor_tests_reporter",
    ]
    if args.workers:
        cmd += ["-n", str(args.workers)]
    if args.keyword:
        cmd += ["-k", args.keyword]
    if mode == "ours":
        cmd += ["-p", "inductor_tests_plugin"]
    for test in sorted(done):
        cmd += ["--deselect", test]
    return cmd


def mode_env(args: argparse.Namespace, mode: str, cache: str, reports: str) -> dict[str, str]:
    env = dict(os.environ)
    # This folder holds both pytest plugins, loaded by name (-p); only "ours" loads the one
    # that imports the backend.
    paths = [str(args.tests / "_deps"), str(args.tests), str(REPO), str(HERE)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["TORCHINDUCTOR_CACHE_DIR"] = cache  # no compiled graph shared between the modes
    env[REPORTS_ENV] = reports
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTORCH_PRINT_REPRO_ON_FAILURE"] = "0"
    if mode == "stock":
        env["INDUCTOR_CUTEDSL_ENABLED"] = "0"  # in case something imports the package anyway
    return env


def run_mode(args: argparse.Namespace, mode: str, log_dir: Path, earlier: dict | None = None) -> dict:
    """Run one mode's pytest; its counts and per-test outcomes (with ``earlier``, that
    mode's result from a previous run, only the tests it has no outcome for, joined to it)."""
    earlier_tests = (earlier or {}).get("tests", {})
    work = Path(tempfile.mkdtemp(prefix=f"inductor_tests_{mode}_"))
    ini = work / "pytest.ini"
    ini.write_text("[pytest]\n")
    junit = work / "junit.xml"
    log_path = log_dir / f"inductor-tests-{mode}.log"
    cmd = pytest_command(args, mode, junit, ini, earlier_tests)
    print(f"== {mode}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    timed_out = False
    with open(log_path, "w") as log:
        env = mode_env(args, mode, str(work / "cache"), str(work / "reports.jsonl"))
        proc = subprocess.Popen(
            cmd, cwd=args.tests, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=args.budget)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                rc = proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
    seconds = round(time.monotonic() - t0, 1)
    text = log_path.read_text(errors="replace")
    tests = outcomes_from_log(text)
    add_messages(tests, work / "reports.jsonl")
    if junit.exists():
        tests.update(outcomes_from_junit(junit.read_text(errors="replace")))
    new = len(tests)
    tests = {**earlier_tests, **tests}
    counts = {o: sum(1 for t in tests.values() if t["outcome"] == o) for o in OUTCOMES}
    tail = text.strip().splitlines()[-3:]
    # A mode is complete when pytest finished on its own: every test it collected has
    # an outcome (in this run or the earlier one).
    complete = not timed_out and rc in (0, 1)
    print(
        f"== {mode}: rc={rc} in {seconds} s{' (cut short)' if timed_out else ''}: {new} outcomes now, "
        + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        + " in all",
        flush=True,
    )
    return {
        "rc": rc,
        "seconds": round(seconds + (earlier or {}).get("seconds", 0.0), 1),
        "timed_out": timed_out,
        "complete": complete,
        "log": str(log_path),
        "counts": counts,
        "last_lines": tail,
        "tests": tests,
    }


def _test_id(classname: str, name: str, file: str | None = None) -> str:
    """``file.py::Class::test`` from junit's dotted classname (xunit1 gives ``file``)."""
    parts = classname.split(".") if classname else []
    if file and classname == file.removesuffix(".py").replace("/", "."):
        parts.append("")  # a module-level test: the classname is its module
    cls = parts[-1] if parts else ""
    mod = file or (("/".join(parts[:-1]) + ".py") if len(parts) > 1 else "")
    return "::".join(x for x in (Path(mod).name if mod else "", cls, name) if x)


def outcomes_from_junit(xml_text: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    root = ET.fromstring(xml_text)
    for case in root.iter("testcase"):
        tid = _test_id(case.get("classname", ""), case.get("name", ""), case.get("file"))
        outcome, message = "passed", ""
        for child in case:
            tag = child.tag
            if tag in ("failure", "error"):
                outcome = "failed" if tag == "failure" else "error"
                message = child.text or child.get("message") or ""
                break
            if tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfailed" if "xfail" in kind else "skipped"
                message = child.get("message") or ""
                break
        entry = {"outcome": outcome}
        if message:
            entry["message"] = excerpt(message)
        out[tid] = entry
    return out


def outcomes_from_log(text: str) -> dict[str, dict]:
    """What ``-v`` printed so far (all a run that was cut short leaves)."""
    out: dict[str, dict] = {}
    for line in text.splitlines():
        m = _XDIST_LINE.match(line)
        if m:
            word, nodeid = m.groups()
        else:
            m = _PLAIN_LINE.match(line)
            if not m:
                continue
            nodeid, word = m.groups()
        if word in _WORDS:
            out[_norm_nodeid(nodeid)] = {"outcome": _WORDS[word]}
    return out


def add_messages(tests: dict[str, dict], reports: Path) -> None:
    """The reporter plugin's failure messages, onto the failed tests' entries."""
    if not reports.exists():
        return
    for line in reports.read_text(errors="replace").splitlines():
        record = json.loads(line)
        entry = tests.get(_norm_nodeid(record["nodeid"]))
        if entry is not None and entry["outcome"] in ("failed", "error") and not entry.get("message"):
            entry["message"] = record["message"]


def _norm_nodeid(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest}"


def _seen(entry: dict) -> list[str]:
    """Every outcome a test had in the runs joined into ``entry`` (``merge_modes``)."""
    return entry.get("seen", [entry["outcome"]])


def load_expected(path: Path | None) -> list[dict]:
    """The reviewed differences (``inductor_tests_expected.json``): tests whose assertion is
    about which kernel Inductor picked, so ours winning a GEMM fails them by design."""
    return json.loads(path.read_text())["differences"] if path and path.exists() else []


def expected_reason(test: str, message: str, expected: list[dict]) -> str | None:
    """Why ``test``'s failure is expected, if an entry names the test and the failure
    says what that entry says it must (a failure for any other reason stays a regression)."""
    for entry in expected:
        if fnmatch.fnmatchcase(test, entry["tests"]) and entry["failure_contains"] in message:
            return entry["why"]
    return None


def compare(modes: dict[str, dict], expected: list[dict] = ()) -> dict:
    """Test by test. A test that passed stock and failed ours is a regression unless
    ``expected`` explains its failure message; one that failed ours in one run and
    passed it in another is listed as flaky instead."""
    stock, ours = modes.get("stock"), modes.get("ours")
    if not stock or not ours:
        return {}
    s, o = stock["tests"], ours["tests"]
    both = sorted(set(s) & set(o))
    bad = ("failed", "error")
    regressions, explained, flaky = [], [], []
    for t in both:
        ours_seen = _seen(o[t])
        if set(_seen(s[t])) != {"passed"} or not set(ours_seen) & set(bad):
            continue
        entry = {"test": t, "ours": o[t]["outcome"], "message": o[t].get("message", "")}
        why = expected_reason(t, entry["message"], expected)
        if "passed" in ours_seen:
            flaky.append({**entry, "seen": ours_seen})
        elif why:
            explained.append({**entry, "why": why})
        else:
            regressions.append(entry)
    return {
        "compared": len(both),
        "only_stock": len(set(s) - set(o)),
        "only_ours": len(set(o) - set(s)),
        "regressions": regressions,
        "expected_differences": explained,
        "flaky_ours": flaky,
        "passes_ours_fails_stock": [t for t in both if s[t]["outcome"] in bad and o[t]["outcome"] == "passed"],
        "failing_both": [t for t in both if s[t]["outcome"] in bad and o[t]["outcome"] in bad],
    }


def merge_modes(base: dict, later: dict, later_is_subset: bool) -> dict:
    """``later``'s outcomes over ``base``'s, test by test, each test keeping every outcome
    it had (``seen``). A subset run (``-k``) does not make an incomplete base complete."""
    tests = dict(base["tests"])
    for t, entry in later["tests"].items():
        old = tests.get(t)
        tests[t] = {**entry, "seen": _seen(old) + _seen(entry)} if old else entry
    counts = {o: sum(1 for e in tests.values() if e["outcome"] == o) for o in OUTCOMES}
    complete = base.get("complete", False) or (later.get("complete", False) and not later_is_subset)
    return {
        **base,
        "tests": tests,
        "counts": counts,
        "complete": complete,
        "seconds": round(base.get("seconds", 0.0) + later.get("seconds", 0.0), 1),
    }


def report(result: dict) -> None:
    for mode, r in result["modes"].items():
        print(
            f"{mode:6s}: "
            + ", ".join(f"{v} {k}" for k, v in r["counts"].items() if v)
            + ("" if r.get("complete") else " (not complete: --resume this file to go on)")
        )
    cmp_ = result.get("comparison") or {}
    if cmp_:
        print(f"compared {cmp_['compared']} tests; pass stock and fail ours: {len(cmp_['regressions'])}")
        for r in cmp_["regressions"]:
            print(f"  {r['test']}: {headline(r['message'])[:200] or '(no message: run it again)'}")
        for key, what in (
            ("expected_differences", "expected (the test asserts which kernel won)"),
            ("flaky_ours", "flaky with ours (passed in another run)"),
        ):
            if cmp_.get(key):
                print(f"{what}: {len(cmp_[key])}")
                for r in cmp_[key]:
                    print(f"  {r['test']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    expected = load_expected(args.expected)
    if args.merge:
        modes: dict[str, dict] = {}
        files = [json.loads(path.read_text()) for path in args.merge]
        for part in files:
            for mode, r in part["modes"].items():
                modes[mode] = merge_modes(modes[mode], r, bool(part.get("keyword"))) if mode in modes else r
        result = {
            "files": files[0].get("files"),
            "merged": [str(p) for p in args.merge],
            "modes": modes,
            "comparison": compare(modes, expected),
        }
    else:
        if not has_gpu() and not args.cpu:
            print("no CUDA GPU: Inductor's GPU tests would all skip; nothing to compare (--cpu runs them anyway)")
            return 0
        args.tests = args.tests.resolve()
        missing = [f for f in args.files if not (args.tests / f).is_file()]
        if missing:
            print(f"not found in {args.tests}: {', '.join(missing)}", file=sys.stderr)
            return 2
        log_dir = args.logs or (args.json.parent if args.json else Path(tempfile.gettempdir()))
        log_dir.mkdir(parents=True, exist_ok=True)
        wanted = MODES if args.mode == "both" else (args.mode,)
        earlier = json.loads(args.resume.read_text())["modes"] if args.resume else {}
        if args.together:
            with concurrent.futures.ThreadPoolExecutor(len(wanted)) as pool:
                futures = {m: pool.submit(run_mode, args, m, log_dir, earlier.get(m)) for m in wanted}
                modes = {m: f.result() for m, f in futures.items()}
        else:
            modes = {mode: run_mode(args, mode, log_dir, earlier.get(mode)) for mode in wanted}
        modes = {**{m: r for m, r in earlier.items() if m not in modes}, **modes}
        result = {
            "files": args.files,
            "keyword": args.keyword,
            "workers": args.workers,
            "gpu": has_gpu(),
            "modes": modes,
            "comparison": compare(modes, expected),
        }
    report(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
