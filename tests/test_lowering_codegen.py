"""The lowering's generated code for a faked H200 (see fake_hopper; no GPU needed)."""

from __future__ import annotations

import pytest
import torch
from fake_hopper import generated_code, generation

M, N, K = 1000, 2048, 1024


def test_cutedsl_only_runs_our_kernel_through_the_runtime():
    code = generated_code(lambda x, w: x @ w.t(), (M, K), (N, K))
    assert "from inductor_cutedsl.runtime.generated import launcher" in code
    assert "extern_kernels.mm" not in code


def test_refused_dtype_falls_back_to_aten():
    code = generated_code(lambda x, w: x @ w.t(), (M, K), (N, K), dtype=torch.float32)
    assert "inductor_cutedsl" not in code
    assert "extern_kernels.mm" in code


def test_faster_aten_wins_the_autotuning():
    def timing(choice):
        return 0.05 if "Extern" in type(choice).__name__ else 0.1

    code = generated_code(lambda x, w: x @ w.t(), (M, K), (N, K), candidate_ms=timing, backends="ATEN,CUTEDSL")
    assert "extern_kernels.mm" in code
    assert "inductor_cutedsl" not in code


def _bmm_out_fp32(a, b):
    return torch.bmm(a, b, out_dtype=torch.float32)


def test_refused_bmm_with_its_own_out_dtype_falls_back_to_atens_dtype_kernel():
    # Inductor's own test_bmm_out_dtype: fp16 inputs, fp32 out, rows of 8 bytes (refused).
    code = generated_code(_bmm_out_fp32, (2, 3, 4), (2, 4, 5), dtype=torch.float16)
    assert "extern_kernels.bmm_dtype" in code
    assert "inductor_cutedsl" not in code


def _bmm_out_fp32_outcome(backends: str) -> str:
    try:
        generated_code(_bmm_out_fp32, (2, 3, 4), (2, 4, 5), dtype=torch.float16, backends=backends)
    except Exception as e:
        return "NoValidChoicesError" if "NoValidChoicesError" in str(e) else repr(e)
    return "compiled"


def test_no_fallback_while_another_backend_is_on():
    # With another backend on, we find a choice exactly where stock Inductor does: on
    # torch 2.11 Triton takes no out_dtype (no choice at all), newer releases' Triton does.
    stock = _bmm_out_fp32_outcome("TRITON")
    assert stock in ("compiled", "NoValidChoicesError")
    assert _bmm_out_fp32_outcome("TRITON,CUTEDSL") == stock


@pytest.mark.parametrize("backends", ["CUTEDSL,ATEN", "CUTEDSL,ATEN,TRITON", "CUTEDSL"])
def test_a_linear_with_bias_is_offered_our_candidates_once(backends):
    """Newer Inductor asks for addmm's choices up to three times (ATen's with the bias as
    given, 1-D; the templates' with it expanded): ours join one ask, with the bias read
    as a row over N either way."""
    import torch.nn.functional as F
    from fake_hopper import generation, launched

    from inductor_cutedsl import config

    out = generation(lambda x, w, b: F.linear(x, w, b), (M, K), (N, K), (N,), backends=backends)
    ((name, choices),) = out["autotuned"]
    assert name == "addmm" and choices.count("GemmCaller") == config.max_configs, choices
    if "cutedsl" in out["code"]:
        assert [op.kind for op in launched(out["code"], 0)["spec"].epilogue.operands] == ["row"]


@pytest.mark.parametrize("graphs", [True, False])
def test_a_decode_sized_gemm_gets_its_stream_k_candidate_only_under_cuda_graphs(graphs):
    """The lowering tells the shortlist whether the graph will replay as CUDA graphs
    (``mode="max-autotune"``): only then is a decode-sized GEMM offered stream-K (here
    rated fastest by the fake autotuning, so it runs wherever it was offered)."""
    from fake_hopper import generation, launched
    from torch._inductor import config as inductor_config

    from inductor_cutedsl import config

    def ms(choice) -> float:
        candidate = getattr(choice, "candidate", None)
        return 0.01 if candidate is not None and candidate.spec.config.stream_k else 1.0

    with config.patch(max_configs=3), inductor_config.patch({"triton.cudagraphs": graphs}):
        out = generation(lambda a, b: a @ b, (16, 2048), (2048, 2048), backends="CUTEDSL", candidate_ms=ms)
    ((name, choices),) = out["autotuned"]
    assert name == "mm" and choices.count("GemmCaller") == 3, choices
    assert launched(out["code"], 0)["spec"].config.stream_k == graphs


def _triton_blocks(fn, *shapes, dtype=torch.bfloat16) -> list[tuple[int, int, int]]:
    """(BLOCK_M, BLOCK_N, BLOCK_K) of each Triton choice the autotuning of ``fn`` timed."""
    import re

    seen = []

    def timing(choice):
        if type(choice).__name__ == "TritonTemplateCaller":
            blocks = dict(re.findall(r"(BLOCK_[MNK])=(\d+)", choice.description))
            seen.append((int(blocks["BLOCK_M"]), int(blocks["BLOCK_N"]), int(blocks["BLOCK_K"])))
        return 1.0

    generated_code(fn, *shapes, dtype=dtype, candidate_ms=timing, backends="ATEN,TRITON,CUTEDSL")
    return seen


@pytest.mark.parametrize("op", ["mm", "addmm"])
def test_beside_our_candidates_triton_keeps_only_its_deepest_k_configs(op, monkeypatch):
    """With our candidates offered, Triton's mm template (mm and addmm) is timed with its
    deepest-K configs only, all of them; with ``prune_triton`` off, with its whole list."""
    from inductor_cutedsl import config

    fn = (lambda x, w: x @ w) if op == "mm" else (lambda x, w, b: torch.addmm(b, x, w))
    shapes = [(256, 2048), (2048, 8192)] + ([(8192,)] if op == "addmm" else [])
    monkeypatch.setattr(config, "prune_triton", False)
    whole = _triton_blocks(fn, *shapes)
    monkeypatch.setattr(config, "prune_triton", True)
    pruned = _triton_blocks(fn, *shapes)
    deepest = max(k for _, _, k in whole)
    assert len(whole) > len(pruned) > 0
    assert sorted(pruned) == sorted(b for b in whole if b[2] == deepest)


def test_without_our_candidates_triton_keeps_its_whole_list():
    """fp32 operands: we offer nothing, so nothing of Triton's is pruned."""
    whole = _triton_blocks(lambda x, w: x @ w, (256, 2048), (2048, 8192), dtype=torch.float32)
    assert len({k for _, _, k in whole}) > 1


def test_pruning_touches_only_the_triton_mm_templates_configs():
    import types

    from inductor_cutedsl.lowering.choices import deepest_k_only

    def ktc(uid, block_k=None):
        params = types.SimpleNamespace(to_kwargs=lambda: {} if block_k is None else {"BLOCK_K": block_k})
        return types.SimpleNamespace(template=types.SimpleNamespace(uid=uid), params=params)

    aten, tma = ktc("aten::mm"), ktc("triton::mm_persistent_tma", 32)
    mm = [ktc("triton::mm", k) for k in (16, 128, 64, 128)]
    assert deepest_k_only([aten, *mm, tma]) == [aten, mm[1], mm[3], tma]
    assert deepest_k_only([aten, tma]) == [aten, tma]


def cutedsl_modules(code: str) -> list[tuple[str, str, dict | None]]:
    """(kernel name, module source, precompile metadata or None) of each CuteDSL module
    defined in wrapper ``code``."""
    import ast
    import re

    out = []
    pattern = r"async_compile\.cutedsl\('(\w+)', r'''(.*?)'''(, precompile_metadata=(.*?))?\)\n"
    for match in re.finditer(pattern, code, re.S):
        name, source, _, metadata = match.groups()
        out.append((name, source, None if metadata is None else ast.literal_eval(metadata)))
    return out


def test_inductors_compile_worker_imports_our_module_without_building_loading_or_warning(monkeypatch, caplog):
    """torch 2.14 on sends each CuteDSL module of a compiled graph to its compile workers
    (``_worker_compile_pycodecache_kernel``), which import it, check its ``_main`` and
    call its ``_precompile`` with the kernel's shapes, warning where there is none. Run
    here, as the worker runs it, on our real generated module: no build, no load, no
    warning, and the parent then imports the module as before."""
    compile_tasks = pytest.importorskip("torch._inductor.runtime.compile_tasks")
    worker = getattr(compile_tasks, "_worker_compile_pycodecache_kernel", None)
    if worker is None:
        pytest.skip("this torch loads CuteDSL modules in the compiling process only (before 2.14)")
    import logging

    from inductor_cutedsl.compat import environment
    from inductor_cutedsl.runtime import generated

    def must_not(*args, **kwargs):
        raise AssertionError("built or loaded in a compile worker")

    modules = cutedsl_modules(generated_code(lambda x, w: torch.relu(x @ w.t()), (M, K), (N, K)))
    assert modules, "the graph runs our kernel"
    monkeypatch.setattr(generated, "build", must_not)
    monkeypatch.setattr(generated, "get_gemm", must_not)
    monkeypatch.setattr(environment, "in_a_compile_worker", lambda: True)
    caplog.clear()  # the fake compile's own warnings
    with caplog.at_level(logging.WARNING):
        for name, source, metadata in modules:
            worker(name, source, "main", {}, metadata or {"shapes": {}})
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def _sum_of_two_matmuls(x, w, y, v):
    return x @ w.t() + y @ v.t()


def _sum_with_a_strided_second_pair(x, w, y_wide, v):
    return x @ w.t() + torch.ops.aten.slice.Tensor(y_wide, 1, 0, K) @ v.t()


def _lowered_sums(wide: int = 0, **fake) -> tuple[dict, list]:
    """``wide``: the second product's A is a view of the first ``K`` columns of a
    tensor ``wide`` columns wider."""
    from inductor_cutedsl.lowering import mm_plus_mm

    before = len(mm_plus_mm.splits)
    fn = _sum_with_a_strided_second_pair if wide else _sum_of_two_matmuls
    out = generation(fn, (M, K), (N, K), (M, K + wide), (N, K), pattern_matcher=True, **fake)
    return out, mm_plus_mm.splits[before:]


def test_a_sum_of_two_matmuls_is_our_gemm_then_our_addmm_over_its_output():
    """Inductor's max-autotune pattern would give ``x @ w.t() + y @ v.t()`` to
    ``mm_plus_mm`` (ATen's two cuBLAS calls or a Triton template). Split, each GEMM is
    autotuned with our candidates, and the second one's epilogue adds the first's output
    as a full-matrix C: evaluated here in float64 (``reference.run``) against the sum
    itself."""
    from fake_hopper import launched

    from inductor_cutedsl.runtime import reference

    out, splits = _lowered_sums(backends="CUTEDSL,ATEN,TRITON")
    assert splits == [{"sizes": [[M, K], [K, N], [M, K], [K, N]]}]
    # The second GEMM is an addmm over the first's output, offered every backend's choices.
    assert [name for name, _ in out["autotuned"]] == ["mm", "addmm"]
    assert all("GemmCaller" in choices and "ExternKernelCaller" in choices for _, choices in out["autotuned"])
    code = out["code"]
    calls = [line.strip() for line in code.splitlines() if ".run(" in line or "_mm_plus_mm" in line]
    assert len(calls) == 2 and all(c.startswith("cutedsl_") for c in calls), calls
    first, second = launched(code, 0), launched(code, 1)
    assert first["spec"].epilogue.is_identity
    (operand,) = second["spec"].epilogue.operands
    assert operand.is_tensor
    g = torch.Generator().manual_seed(0)
    x, w, y, v = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((M, K), (N, K), (M, K), (N, K)))

    def run(launch: dict, a, b, operands) -> torch.Tensor:
        out = torch.full((M, N), float("nan"), dtype=torch.float64)  # poisoned: every element must be written
        views = (launch["scalars"], launch["views"], launch["out_view"])
        reference.run(launch["spec"], a, b, out, operands, *views, dtype=torch.float64)
        return out

    result = run(second, y, v.t(), (run(first, x, w.t(), ()),))
    expected = x @ w.t() + y @ v.t()
    # Each GEMM rounds its output to bf16, as the kernels do: within bf16's step of the sum.
    assert ((result - expected).norm() / expected.norm()).item() < 2**-8


def test_a_sum_of_two_matmuls_where_cublas_wins_both_is_two_cublas_calls():
    """Where ATen's choice is fastest for both GEMMs, the split is the two cuBLAS calls of
    ATen's ``_mm_plus_mm``: an ``mm`` and an ``addmm`` that takes the first product as C
    (cuBLAS's beta), with no add of its own: an ``add(mm, mm)`` would be a third kernel
    stock does not run."""

    def aten_fastest(choice) -> float:
        return 0.1 if type(choice).__name__ == "ExternKernelCaller" else 1.0

    out, splits = _lowered_sums(backends="CUTEDSL,ATEN,TRITON", candidate_ms=aten_fastest)
    assert len(splits) == 1
    code = out["code"]
    assert ".run(" not in code, "no kernel of ours or Triton's: the add is in cuBLAS's beta"
    calls = [line.strip() for line in code.splitlines() if "extern_kernels." in line]
    assert [c.split("(")[0] for c in calls] == ["extern_kernels.mm", "extern_kernels.addmm"], calls
    first_out = calls[0].split("out=")[1].rstrip(")")
    assert calls[1].startswith(f"extern_kernels.addmm({first_out},"), calls


def _sum_of_products_of_views(x3, w, y3, v):
    return (x3 * 2).reshape(-1, K) @ w.t() + (y3 + 1).reshape(-1, K) @ v.t()


def test_a_sum_of_two_matmuls_of_views_of_computed_values_is_split_too():
    """A training step's input gradient through two projections (a gated MLP's gate and
    up) sums products whose A is a 3-D gradient reshaped to 2-D: a view of a value not
    stored yet, which has no strides until realized. Realized first, as either lowering
    does, the sum splits into two of our GEMMs (strictly: a failure here would raise)."""
    from inductor_cutedsl.lowering import mm_plus_mm

    before = len(mm_plus_mm.splits)
    shapes = ((2, M // 2, K), (N, K), (2, M // 2, K), (N, K))
    out = generation(_sum_of_products_of_views, *shapes, pattern_matcher=True, backends="CUTEDSL,ATEN,TRITON")
    assert mm_plus_mm.splits[before:] == [{"sizes": [[M, K], [K, N], [M, K], [K, N]]}]
    calls = [line.strip() for line in out["code"].splitlines() if ".run(" in line or "_mm_plus_mm" in line]
    assert sum(c.startswith("cutedsl_") for c in calls) == 2, calls


@pytest.mark.parametrize("change", ["setting off", "backend off", "float32", "unaligned second"])
def test_a_sum_of_two_matmuls_keeps_inductors_mm_plus_mm_where_we_take_no_part(change):
    """Split, a sum our kernel cannot take would only lose Triton's template."""
    from inductor_cutedsl import config

    fake: dict = {"backends": "CUTEDSL,ATEN,TRITON"}
    if change == "unaligned second":  # the second A's rows 2056 bytes apart
        fake["wide"] = 4
    if change == "backend off":
        fake["backends"] = "ATEN,TRITON"
    if change == "float32":
        fake["dtype"] = torch.float32
    with config.patch(split_mm_plus_mm=change != "setting off"):
        out, splits = _lowered_sums(**fake)
    assert splits == []
    assert [name for name, _ in out["autotuned"]] == ["mm_plus_mm"]
    assert "GemmCaller" not in out["autotuned"][0][1]


def test_a_failure_in_the_split_lowers_inductors_mm_plus_mm(monkeypatch, lenient, caplog):
    """A failure in the split's own lowering (planted in the addmm, after the first GEMM
    was lowered) falls back to Inductor's ``mm_plus_mm`` and is logged; the GEMMs lowered
    before it are dead and leave no kernel in the code."""
    import logging

    from torch._inductor.lowering import lowerings

    from inductor_cutedsl import errors

    def planted(*args, **kwargs):
        raise RuntimeError("planted failure")

    caplog.set_level(logging.WARNING, logger="inductor_cutedsl")
    before = len(errors.fallbacks)
    monkeypatch.setitem(lowerings, torch.ops.aten.addmm, planted)
    out, splits = _lowered_sums(backends="CUTEDSL,ATEN,TRITON")
    assert splits == []
    assert [r["stage"] for r in errors.fallbacks[before:]] == ["lowering"]
    assert any("planted failure" in r.getMessage() for r in caplog.records)
    assert [name for name, _ in out["autotuned"]][-1] == "mm_plus_mm"
    assert "cutedsl_" not in out["code"], "the GEMM lowered before the failure was dropped"


def test_disable_restores_inductors_mm_plus_mm():
    from torch._inductor.kernel import mm_plus_mm as stock

    import inductor_cutedsl
    from inductor_cutedsl import install

    was_enabled = inductor_cutedsl.is_enabled()
    install._install_rest()
    assert getattr(stock.tuned_mm_plus_mm, "splits_for_cutedsl", False) == was_enabled
    inductor_cutedsl.disable()
    try:
        assert not getattr(stock.tuned_mm_plus_mm, "splits_for_cutedsl", False)
        inductor_cutedsl.enable()
        install._install_rest()
        assert getattr(stock.tuned_mm_plus_mm, "splits_for_cutedsl", False)
    finally:
        if not was_enabled:
            inductor_cutedsl.disable()
