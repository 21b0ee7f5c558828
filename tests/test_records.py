"""Decisions kept beside the kernels (``runtime/records.py``): a later compile with the
same GEMMs and epilogues takes them instead of measuring again."""

from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
from fake_hopper import generated_code
from test_fusion_codegen import K, M, N, by_backend, kernels

from inductor_cutedsl import config
from inductor_cutedsl.install import reenabled
from inductor_cutedsl.lowering import gated
from inductor_cutedsl.runtime import records
from inductor_cutedsl.scheduler import selection


def test_a_record_is_read_back_by_its_whole_key_only(tmp_path):
    with config.patch(persist_decisions=True, cache_dir=str(tmp_path)):
        assert records.read("selection", "k1", "cpu") is None
        records.write("selection", "k1", "cpu", "fused")
        assert records.read("selection", "k1", "cpu") == "fused"
        assert records.read("selection", "k2", "cpu") is None and records.read("gated", "k1", "cpu") is None
        (path,) = (tmp_path / "records" / "selection").iterdir()
        path.write_text(json.dumps({"key": "another key", "value": "triton_fused"}))  # a digest collision
        assert records.read("selection", "k1", "cpu") is None
        path.write_text("{not json")
        assert records.read("selection", "k1", "cpu") is None
    with config.patch(persist_decisions=False, cache_dir=str(tmp_path / "off")):
        records.write("selection", "k1", "cpu", "fused")
        assert records.read("selection", "k1", "cpu") is None and not (tmp_path / "off" / "records").exists()


def test_an_unwritable_cache_keeps_no_record(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # others may write: not trusted, not persistent
    with config.patch(persist_decisions=True, cache_dir=str(shared)):
        records.write("selection", "k", "cpu", "fused")
        assert records.read("selection", "k", "cpu") is None
    assert not list(shared.iterdir())


def _relu_gemm(side_ms: dict) -> str:
    return generated_code(
        lambda x, w: torch.relu(x @ w.t()),
        (M, K),
        (N, K),
        candidate_ms=by_backend(ours=0.10, aten=0.105, triton=0.12),
        fused_ms=0.2,
        side_ms=side_ms,
        backends="ATEN,TRITON,CUTEDSL",
    )


def test_a_later_compile_takes_the_recorded_way_without_measuring(tmp_path):
    cublas_wins = {"ours_separate": 0.13, "other_separate": 0.12}
    ours_wins = {"ours_separate": 0.12, "other_separate": 0.13}
    before = (len(selection.decisions), selection.stats["recorded"])
    with (
        reenabled(epilogue_fusion=True, max_configs=2, measure_clear_calls=True),
        config.patch(persist_decisions=True, cache_dir=str(tmp_path)),
    ):
        first = _relu_gemm(cublas_wins)
        # Another graph, where the fake timings now favour ours: the record answers.
        second = _relu_gemm(ours_wins)
        assert len(selection.decisions) == before[0] + 1 and selection.stats["recorded"] == before[1] + 1
        with config.patch(persist_decisions=False):
            third = _relu_gemm(ours_wins)  # measured again
    assert len(selection.decisions) == before[0] + 2
    assert "extern_kernels.mm" in first and "extern_kernels.mm" in second
    assert kernels(third) == (1, 1) and "extern_kernels.mm" not in third


def test_a_later_compile_takes_the_recorded_gated_decision(tmp_path):
    def mlp(x, wg, wu, wd):
        return x + F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)

    shapes = [(2, 500, 1024), (4096, 1024), (4096, 1024), (1024, 4096)]
    before = (len(gated.decisions), gated.stats["recorded"])
    with reenabled(epilogue_fusion=True, max_configs=2), config.patch(persist_decisions=True, cache_dir=str(tmp_path)):
        first = generated_code(mlp, *shapes, gated_ms=(0.2, 0.1))  # two GEMMs measure faster
        second = generated_code(mlp, *shapes, gated_ms=(0.1, 0.2))  # the record answers
    assert len(gated.decisions) == before[0] + 1 and gated.stats["recorded"] == before[1] + 1
    assert "dual=True" not in first and "dual=True" not in second


def test_records_travel_with_the_portable_cache_artifacts(tmp_path, caplog):
    """A record written (or read) is recorded for ``save_cache_artifacts()``; loaded into
    an empty cache it answers there. A name that is not ``KIND/DIGEST`` is refused."""
    from torch.compiler._cache import CacheArtifactManager

    with CacheArtifactManager.with_fresh_cache():
        with config.patch(persist_decisions=True, cache_dir=str(tmp_path / "a")):
            records.write("gated", "a product", "cpu", {"best": 1})
        blob, info = torch.compiler.save_cache_artifacts()
        assert len(getattr(info, f"{records.ARTIFACT_TYPE}_artifacts")) == 1
        with config.patch(persist_decisions=True, cache_dir=str(tmp_path / "b")):
            assert records.read("gated", "a product", "cpu") is None
            torch.compiler.load_cache_artifacts(blob)
            assert records.read("gated", "a product", "cpu") == {"best": 1}
            records.populate("../../escape", b'{"key": "k", "value": 1}')
            records.populate("selection/" + "0" * 40, b'["not", "a record"]')
    assert "not a record's name" in caplog.text and "not a record" in caplog.text
    assert not list(tmp_path.glob("*.json")) and len(list((tmp_path / "b").rglob("*.json"))) == 1
