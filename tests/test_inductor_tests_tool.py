"""``benchmarks/inductor_tests.py`` on CPU (``--cpu``), on a small stand-in for PyTorch's
test files: outcomes per mode, the comparison, ``--together`` and ``--resume``."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import inductor_tests  # noqa: E402

STAND_IN = '''
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
'''


def _run(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    argv = ["--tests", str(tmp_path / "t"), "--files", "test_stand_in.py", "-n", "0", "--cpu",
            "--budget", "240", "--json", str(out), *extra]  # fmt: skip
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
