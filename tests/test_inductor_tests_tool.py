"""``tools/inductor_tests`` on CPU (``--cpu``), on a small stand-in for PyTorch's test
files: outcomes per mode, the comparison, ``--together`` and ``--resume``."""

from __future__ import annotations

import json
from pathlib import Path

from tools.inductor_tests import inductor_tests

STAND_IN = """
import sys

from torch._inductor import config


def test_passes_both():
    pass


def test_fails_both():
    assert False, "broken in both"


def test_passes_stock_only():
    assert "inductor_cutedsl" not in sys.modules, "the backend is loaded"


def test_backends_keep_the_token():
    with config.patch(max_autotune_gemm_backends="TRITON"):
        loaded = "inductor_cutedsl" in sys.modules
        assert ("CUTEDSL" in config.max_autotune_gemm_backends) == loaded
"""


def _run(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    argv = [
        "--tests",
        str(tmp_path / "t"),
        "--files",
        "test_stand_in.py",
        "-n",
        "0",
        "--cpu",
        "--budget",
        "240",
        "--json",
        str(out),
        *extra,
    ]
    assert inductor_tests.main(argv) == 0
    return json.loads(out.read_text())


def test_modes_compared_together_then_resumed(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_stand_in.py").write_text(STAND_IN)
    first = _run(tmp_path, "first", "--together", "-k", "passes or fails")
    for mode in ("stock", "ours"):
        assert first["modes"][mode]["complete"]
        assert len(first["modes"][mode]["tests"]) == 3
    cmp_ = first["comparison"]
    assert [r["test"] for r in cmp_["regressions"]] == ["test_stand_in.py::test_passes_stock_only"]
    assert cmp_["failing_both"] == ["test_stand_in.py::test_fails_both"]

    # Resumed: only the test without an outcome runs; the earlier outcomes stay.
    second = _run(tmp_path, "second", "--resume", str(tmp_path / "first.json"))
    for mode in ("stock", "ours"):
        tests = second["modes"][mode]["tests"]
        assert len(tests) == 4
        assert tests["test_stand_in.py::test_backends_keep_the_token"]["outcome"] == "passed"
    log = Path(second["modes"]["ours"]["log"]).read_text()
    assert "test_passes_both PASSED" not in log and "test_backends_keep_the_token PASSED" in log
    assert second["comparison"]["compared"] == 4


CUT_SHORT = """
import time


def test_fails_early():
    assert 1 == 2, "broken early"


def test_runs_past_the_budget():
    time.sleep(300)
"""


def test_a_run_cut_short_keeps_failure_messages(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_stand_in.py").write_text(CUT_SHORT)
    out = tmp_path / "cut.json"
    argv = [
        "--tests",
        str(tmp_path / "t"),
        "--files",
        "test_stand_in.py",
        "-n",
        "0",
        "--cpu",
        "--mode",
        "stock",
        "--budget",
        "20",
        "--json",
        str(out),
    ]
    assert inductor_tests.main(argv) == 0
    stock = json.loads(out.read_text())["modes"]["stock"]
    assert stock["timed_out"] and not stock["complete"]
    failed = stock["tests"]["test_stand_in.py::test_fails_early"]
    assert failed["outcome"] == "failed" and "broken early" in failed["message"]


def _mode(**outcomes: str | list[str]) -> dict:
    tests = {}
    for name, outcome in outcomes.items():
        seen = outcome if isinstance(outcome, list) else [outcome]
        tests[f"t.py::{name}"] = {"outcome": seen[-1], "message": f"E   {name} said so", "seen": seen}
    return {"tests": tests}


def test_comparison_explains_only_failures_an_entry_names():
    expected = [
        {"tests": "t.py::test_picks_*", "failure_contains": "test_picks_triton said", "why": "asserts which kernel won"}
    ]
    stock = _mode(test_picks_triton="passed", test_picks_other="passed", test_flaky="passed", test_both="failed")
    ours = _mode(
        test_picks_triton="failed", test_picks_other="failed", test_flaky=["failed", "passed"], test_both="failed"
    )
    cmp_ = inductor_tests.compare({"stock": stock, "ours": ours}, expected)
    assert [r["test"] for r in cmp_["expected_differences"]] == ["t.py::test_picks_triton"]
    # Same pattern, but its failure does not say what the entry names: still a regression.
    assert [r["test"] for r in cmp_["regressions"]] == ["t.py::test_picks_other"]
    assert [r["test"] for r in cmp_["flaky_ours"]] == ["t.py::test_flaky"]
    assert cmp_["failing_both"] == ["t.py::test_both"]


def test_merge_keeps_every_outcome_and_subset_runs_complete_nothing():
    base = {**_mode(test_a="failed", test_b="passed"), "complete": False, "seconds": 10.0}
    rerun = {**_mode(test_a="passed"), "complete": True, "seconds": 2.0}
    merged = inductor_tests.merge_modes(base, rerun, later_is_subset=True)
    assert merged["tests"]["t.py::test_a"]["seen"] == ["failed", "passed"]
    assert merged["tests"]["t.py::test_a"]["outcome"] == "passed"
    assert merged["counts"]["passed"] == 2 and not merged["complete"]
    assert inductor_tests.merge_modes(base, rerun, later_is_subset=False)["complete"]


def test_the_committed_expected_differences_are_well_formed():
    entries = inductor_tests.load_expected(inductor_tests.EXPECTED)
    assert entries
    for entry in entries:
        assert set(entry) == {"tests", "failure_contains", "why"}
        assert "::" in entry["tests"] and entry["failure_contains"] and entry["why"]


def test_a_failure_keeps_its_exception_line_however_long_the_dump_below_it():
    """Inductor's lowering errors print the exception first and then dozens of lines of
    IR: the excerpt keeps the "E" lines from the top and the end, and the headline is the
    line that names the error."""
    from tools.inductor_tests.inductor_tests_reporter import excerpt, headline

    text = "\n".join(
        [
            "test_x.py:12: in test_y",
            "    f(a)",
            "E   torch._inductor.exc.InductorError: LoweringException: NoValidChoicesError: none",
            *[f"E     ir line {i}" for i in range(80)],
            "E   Found from :",
            "E      File x.py, line 3",
        ]
    )
    short = excerpt(text)
    assert "LoweringException: NoValidChoicesError" in short and "x.py, line 3" in short
    assert len(short.splitlines()) < 45
    assert headline(short).startswith("E   torch._inductor.exc.InductorError: LoweringException")
    assert headline("plain text\nlast line") == "last line"
