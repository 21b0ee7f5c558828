"""The fuzz (benchmarks/fuzz.py) on CPU: its generators are deterministic and cover the
space, the runtime takes exactly the cases drawn to run and refuses the others by the
rule their flaw breaks, its checks pass right results and catch wrong ones, every
refusal reason the package can give has a rule, and the result file has its keys."""

from __future__ import annotations

import ast
import collections
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import calls_of, package_trees

from benchmarks import fuzz
from inductor_cutedsl.errors import Unsupported
from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import launch, support

ROOT = Path(__file__).resolve().parents[1]
CASES_PER_SPEC = 30
ALL_CASES = [case for index in range(len(fuzz.SPECS)) for case in fuzz.cases_for(index, CASES_PER_SPEC)]
PROGRAMS = [fuzz.make_program(i) for i in range(200)]
MODELS = [fuzz.make_model_program(i) for i in range(100)]


# --- Generators -------------------------------------------------------------------------


def test_generators_are_deterministic():
    assert [fuzz.make_case(i, 7) for i in range(len(fuzz.SPECS))] == [c for c in ALL_CASES if c.number == 7]
    assert fuzz.make_case(3, 7) != fuzz.make_case(3, 8)
    assert fuzz.make_program(3) == PROGRAMS[3] and fuzz.make_model_program(5) == MODELS[5]
    assert [s.id() for s in fuzz.drawn_specs()] == [s.id() for s in fuzz.SPECS[len(fuzz.CORNER_SPECS) :]]
    t1, t2 = PROGRAMS[4].inputs("cpu"), PROGRAMS[4].inputs("cpu")
    assert all(torch.equal(t1[k], t2[k]) for k in t1)


def test_specs_are_few_distinct_and_cover_the_space():
    specs = [s.kernel_spec() for s in fuzz.SPECS]
    assert len(set(specs)) == len(specs) <= 90
    assert {(s.a_major, s.b_major) for s in specs} == {("k", "n"), ("k", "k"), ("m", "n"), ("m", "k")}
    assert {s.ab_dtype for s in specs} == {"bfloat16", "float16", "float8_e4m3fn"}
    assert {s.out_dtype for s in specs} == {"bfloat16", "float16", "float32", "float8_e4m3fn"}
    assert {s.promote for s in specs if s.ab_dtype == "float8_e4m3fn"} == {0, 1, 2, 3}
    ops = [op for s in specs for op in s.epilogue.operands]
    assert {op.kind for op in ops} == set(E.OPERAND_KINDS)
    assert any(op.pairs for op in ops) and any(op.staged for op in ops)
    configs = [s.config for s in specs]
    assert any(c.stream_k for c in configs) and any(c.pingpong for c in configs) and any(c.epi_buffers for c in configs)
    assert {c.tile_m for c in configs} == {64, 128, 256} and {c.tile_n for c in configs} >= {64, 128, 192, 256}
    assert {c.cluster_size for c in configs} == {1, 2, 4}
    assert collections.Counter(s.api for s in fuzz.SPECS).keys() == {"gemm", "gated", "scaled"}
    gated = [s.gated for s in fuzz.SPECS if s.gated]
    assert {g.act for g in gated} == set(E.GATED_ACTIVATIONS) and {g.fused for g in gated} == {False, True}
    assert any(g.keep and g.pairs for g in gated) and any(g.keep and not g.pairs for g in gated)
    scaled = [s.scaled for s in fuzz.SPECS if s.scaled]
    assert {(x.scale_a, x.scale_b) for x in scaled} == {
        ("tensor", "tensor"),
        ("tensor", "row"),
        ("row", "tensor"),
        ("row", "row"),
    }
    assert {x.fast_accum for x in scaled} == {False, True} and any(x.scale_result for x in scaled)


def test_every_config_group_the_package_offers_has_a_spec():
    groups = {(kind, group) for kind, found in fuzz.offered_configs().items() for group in found}
    assert len(groups) >= 30
    origins = {s.origin for s in fuzz.SPECS}
    assert {group for _, group in groups} <= origins
    for spec in fuzz.SPECS:  # each drawn spec's config is one the package offers
        if spec.origin != "corner":
            kind = "dual" if spec.gated else "promote" if spec.kernel_promote else "plain"
            assert spec.config in fuzz.offered_configs()[kind][spec.origin], spec.id()


def test_specs_pass_the_kernels_own_checks():
    """Each spec passes the kernel class's checks (config, staging, epilogue source)
    without compiling; ``FuzzSpec.invalid_reason`` is the generator's own view of them."""
    pytest.importorskip("cutlass")
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    for s in fuzz.SPECS:
        assert s.invalid_reason() is None
        k = s.kernel_spec()
        Sm90Gemm(k.config, k.ab_dtype, k.out_dtype, k.a_major, k.b_major, k.epilogue, k.dual, k.promote)


def test_cases_cover_sizes_layouts_and_every_flaw():
    ok = [c for c in ALL_CASES if c.expect_ok]
    assert len(ok) >= 2000
    assert any(c.m % 2 and c.k % 2 for c in ok), "odd sizes"
    assert any(min(c.m, c.k) == 1 for c in ok) and max(c.m for c in ok) > 700
    assert {c.batch for c in ok} == {None, 1, 2, 3, 4}
    assert all(c.n * fuzz.TORCH_DTYPES[c.spec.out_dtype].itemsize % 16 == 0 for c in ok), "whole 16-byte rows"
    assert any(
        c.a.stride[-2 if c.spec.a_major == "k" else -1] > c.a.size[-1 if c.spec.a_major == "k" else -2] for c in ok
    ), "padded leading dims"
    assert any(c.out.offset and c.a.offset and c.b.offset for c in ok), "storage offsets"
    operands = [op for c in ok for op in c.operands if op.view is not None]
    assert any(len(op.view.size) < 3 for op in operands if op.kind == "full"), "full operand broadcast over batches"
    assert any(op.view.stride[-1] > 1 for op in operands if op.kind == "row"), "strided row operand"
    assert any(op.view.stride[-2] == 1 for op in operands if op.kind == "full"), "column-major operand"
    assert any(c.b_up is not None and c.b_up.stride == c.b.stride and c.b_up.offset != c.b.offset for c in ok), (
        "gate and up as two halves of one weight"
    )
    every = [fuzz.make_case(spec, number) for _, spec, numbers in fuzz.runtime_items(10000) for number in numbers]
    flaws = collections.Counter(c.flaw for c in every)
    assert set(flaws) == {""} | set(fuzz.FLAW_RULES), flaws
    assert 0.04 < 1 - flaws[""] / len(every) < 0.1


def _recording_kernels(monkeypatch) -> list:
    """The runtime's kernels replaced by a recorder of the spec each call asked for
    (nothing computed); the runtime's own checks all kept, but the device's."""
    monkeypatch.setattr(support, "device_reason", lambda device: None)
    monkeypatch.setattr(launch, "_memo", {})
    requested = []

    def get_gemm(spec, cache=None, path=None):
        requested.append(spec)
        launch._memo[spec.key()] = lambda *args, **kwargs: None
        return launch._memo[spec.key()]

    monkeypatch.setattr(launch, "get_gemm", get_gemm)
    return requested


def test_runtime_takes_exactly_the_cases_drawn_to_run(monkeypatch):
    """On CPU tensors laid out as on the GPU, through the runtime's entries, every case
    of the long run (10,000): a case drawn to run is taken with its spec's kernel (so one kernel serves all of a spec's
    cases, and the precompiled ones are those that run); a flawed one is refused by the
    rule its flaw breaks."""
    requested = _recording_kernels(monkeypatch)
    wrong, rules = [], collections.Counter()
    every = [fuzz.make_case(spec, number) for _, spec, numbers in fuzz.runtime_items(10000) for number in numbers]
    for case in every:
        t = fuzz.case_tensors(case, "cpu", fill="empty")
        requested.clear()
        try:
            fuzz.run_case(case, t)
        except ValueError as exc:
            rule, explained = fuzz.judge_refusal(case, str(exc))
            rules[rule] += 1
            if not explained:
                wrong.append((case.describe(), str(exc)))
            continue
        if case.flaw or requested != [case.spec.kernel_spec()]:
            wrong.append((case.describe(), [s.describe() for s in requested]))
    assert not wrong, wrong[:5]
    assert set(rules) == set(fuzz.FLAW_RULES.values())


def _emulated_kernels(monkeypatch, corrupt: str = "") -> None:
    """The runtime's kernels replaced by ``runtime.reference.run`` in float64 (what each
    kernel computes, from its epilogue's own source), optionally with a planted bug:
    "value" (20% off everywhere, beyond every output dtype's tolerance), "nan" (one
    element left unwritten), "outside" (a write into the output's row padding),
    "transposed" (B read with the other major), "row_shift" (each row written one row
    down)."""
    from inductor_cutedsl.runtime import reference

    monkeypatch.setattr(support, "device_reason", lambda device: None)
    monkeypatch.setattr(launch, "_memo", {})

    def get_gemm(spec, cache=None, path=None):
        def kernel(a, b, out, *operands, stream=None, b_up=None):
            decls = spec.epilogue.operands
            tensors = [v for d, v in zip(decls, operands, strict=True) if d.is_tensor]
            scalars = [v for d, v in zip(decls, operands, strict=True) if not d.is_tensor]
            if corrupt == "transposed":
                b = b.contiguous().reshape(*b.shape[:-2], b.shape[-1], b.shape[-2]).transpose(-1, -2)
            reference.run(spec, a, b, out, tensors, scalars, b_up=b_up, dtype=torch.float64)
            if corrupt == "value":
                out.copy_(out.double() * 1.2)
            elif corrupt == "nan":
                out[(0,) * out.dim()] = float("nan")
            elif corrupt == "outside":
                out.as_strided((1,), (1,), out.storage_offset() + out.shape[-1]).fill_(0)
            elif corrupt == "row_shift":
                out[..., 1:, :] = out[..., :-1, :].clone()

        launch._memo[spec.key()] = kernel
        return kernel

    monkeypatch.setattr(launch, "get_gemm", get_gemm)


def _small_cases(condition=lambda c: True, per_spec: int = 2) -> list:
    cases = []
    for index in range(len(fuzz.SPECS)):
        found = [c for c in fuzz.cases_for(index, 60) if c.expect_ok and c.m * c.n * c.k < 3e6 and condition(c)]
        cases += found[:per_spec]
    return cases


def test_the_check_passes_right_results_of_every_spec(monkeypatch):
    """Each spec's hand-written float64 reference agrees with what its kernel computes
    by its epilogue's source (``runtime.reference``), through the runtime's entries."""
    _emulated_kernels(monkeypatch)
    cases = _small_cases()
    assert {c.spec_index for c in cases} == set(range(len(fuzz.SPECS)))
    for case in cases:
        assert fuzz.check_case(case, "cpu") is None, case.describe()


PLANTED = {
    "value": lambda c: True,
    "nan": lambda c: True,
    "outside": lambda c: c.out.stride[-2] > c.n and c.m > 1,
    "transposed": lambda c: c.k > 1 and c.n > 1,
    "row_shift": lambda c: c.m > 1,
}


@pytest.mark.parametrize("corrupt", sorted(PLANTED))
def test_the_check_catches_planted_bugs(monkeypatch, corrupt):
    _emulated_kernels(monkeypatch, corrupt)
    cases = _small_cases(lambda c: c.spec.out_dtype != "float8_e4m3fn" and PLANTED[corrupt](c), per_spec=1)
    assert len(cases) > 40
    for case in cases:
        with pytest.raises(AssertionError):
            fuzz.check_case(case, "cpu")
    # And through check_runtime: each is counted wrong, none crashes.
    index = cases[0].spec_index
    outcome = fuzz.check_runtime(index, [cases[0].number], "cpu")
    assert (outcome.wrong, outcome.crashes, outcome.checked) == (1, 0, 0) and not outcome.ok


def test_check_runtime_counts_refusals_by_rule(monkeypatch):
    _recording_kernels(monkeypatch)
    index = next(i for i in range(len(fuzz.SPECS)) if any(c.flaw for c in fuzz.cases_for(i, 40)))
    outcome = fuzz.check_runtime(index, range(40), "cpu")
    flaws = [c.flaw for c in fuzz.cases_for(index, 40) if c.flaw]
    assert sum(outcome.refused.values()) == len(flaws) and outcome.unexplained == 0
    assert outcome.refused == dict(collections.Counter(fuzz.FLAW_RULES[f] for f in flaws))
    # A case drawn to run that the runtime refuses is unexplained.
    monkeypatch.setattr(support, "row_width_reason", lambda n, dtype: "output rows of 3 bytes, not a multiple of 16")
    outcome = fuzz.check_runtime(index, range(10), "cpu")
    assert outcome.unexplained and not outcome.ok


# --- Refusal rules ----------------------------------------------------------------------

#: Where the package words its refusals: every ``Unsupported(...)``, and the strings
#: these functions return or assign to ``reason``.
REASON_FUNCTIONS = {"codegen_blocked", "device_reason", "_device_reason", "_operand_reason"}
#: Reasons only ever used inside another one (``declaration_reason`` words them).
FRAGMENT_FUNCTIONS = {"pairs_reason", "staged_reason"}
#: Functions named like reasons that are no GEMM refusal (the kernel cache's trust, the CLI's
#: GPU, why a sum of two matmuls is not split: its GEMMs' refusals are check_plain_gemm's).
NOT_REFUSALS = {"trust_reason", "gpu_reason", "split_reason"}
#: The config's rules, which the runtime reports as "config NAME: ...".
CONFIG_FUNCTIONS = {"invalid_reason", "dual_reason", "promotion_reason"}


def _render(node) -> str | None:
    """A string expression with every formatted value as "7"; None if not a string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "7" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _render(node.left), _render(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.IfExp):
        return _render(node.body)
    return None


def package_reasons() -> list[tuple[str, str]]:
    """(where, reason) for every refusal reason the package's source words: each
    ``Unsupported(...)``, each string a reason function returns, each string assigned to
    a ``reason``."""
    found = []
    for path, tree in package_trees():
        where = str(path.relative_to(ROOT))
        for node in calls_of(tree, "Unsupported"):
            if node.args and (text := _render(node.args[0])) is not None:
                found.append((f"{where}:{node.lineno}", text))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef) or func.name in FRAGMENT_FUNCTIONS | NOT_REFUSALS:
                continue
            returns = func.name.endswith("_reason") or func.name in REASON_FUNCTIONS
            prefix = "config 7: " if func.name in CONFIG_FUNCTIONS else ""
            for node in ast.walk(func):
                returned = isinstance(node, ast.Return) and returns and node.value is not None
                assigned = isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "reason" for t in node.targets)
                if not (returned or assigned):
                    continue
                text = _render(node.value)
                if text is not None:
                    found.append((f"{where}:{node.lineno} {func.name}", prefix + text))
    return found


#: Reasons that only wrap another: "NAME: <reason>" and the like.
WRAPPER = r"^(?:7|out|operand 7 is|inductor_cutedsl cannot run this (?:\w+ )*GEMM)?:? ?7$"


def test_every_reason_in_the_package_has_a_rule():
    import re

    reasons = [(w, r) for w, r in package_reasons() if not re.match(WRAPPER, r)]
    assert len(reasons) > 80
    unknown = [(w, r) for w, r in reasons if fuzz.classify(r) is None]
    assert not unknown, unknown
    assert {fuzz.classify(r) for _, r in reasons} <= fuzz.KNOWN_RULES


def test_the_rule_table_gives_the_rule_the_package_names():
    """Each ``Unsupported(reason, rule)`` of the package's source: its rule is one the
    package declares, and the fuzz's table gives that rule from the reason's text alone
    (what a log line that carries only the text is classified by)."""
    from inductor_cutedsl import errors

    pairs = []
    for path, tree in package_trees():
        for node in calls_of(tree, "Unsupported"):
            rule = node.args[1] if len(node.args) > 1 else next(k.value for k in node.keywords if k.arg == "rule")
            assert isinstance(rule, ast.Constant) and rule.value in errors.RULES, (path, node.lineno)
            if (text := _render(node.args[0])) is not None:
                pairs.append((f"{path.name}:{node.lineno}", text, rule.value))
    assert len(pairs) > 50
    wrong = [(where, text, rule, fuzz.classify(text)) for where, text, rule in pairs if fuzz.classify(text) != rule]
    assert not wrong, wrong
    assert set(errors.RULES) <= fuzz.KNOWN_RULES


def test_the_classifier_reads_the_rule_and_flags_an_unknown_reason():
    assert fuzz.classify(Unsupported("anything at all", "dual-config")) == "dual-config"
    assert fuzz.classify("op 'sign' has no CuteDSL epilogue translation") == "unsupported-op"
    assert fuzz.classify("buf3 is read in some new way [indexing]") == "indexing"
    assert fuzz.classify("a new reason [no-such-rule]") is None
    assert fuzz.classify("the scheduler did not pair them (size, order or memory rule)") == "not-paired"
    left = "buf1: left to Inductor (no CuteDSL candidate within 1.15x of the fastest)"
    assert fuzz.classify(left) == "measured-slower"
    assert fuzz.classify("its translation failed (KeyError)") is None
    assert fuzz.classify("buf1: nothing measured; left to Inductor") is None
    assert fuzz.classify("a reason nobody wrote a rule for") is None


def _bad_runtime_calls():
    from inductor_cutedsl.runtime import gated_gemm, gemm, scaled_gemm

    bf = torch.bfloat16
    a, b = torch.empty(64, 64, dtype=bf), torch.empty(64, 64, dtype=bf)
    f8a, f8b = torch.empty(64, 64, dtype=torch.float8_e4m3fn), torch.empty(64, 64, dtype=torch.float8_e4m3fn).t()
    one = torch.ones((), dtype=torch.float32)
    scale = "def epilogue(acc, m, n, l, ops):\n    return acc * ops[0]\n"
    one_value = E.Epilogue("one_value", scale, (E.EpilogueOperand("s", "one", "float32"),))
    return {
        "dtype": [
            lambda: gemm(a.float(), b.float()),
            lambda: gemm(a, b, out_dtype=torch.int32),
            lambda: gemm(a, b, "x", epilogue=E.bias()),
            lambda: gated_gemm(a, b, b, bias_gate=torch.empty(64, dtype=torch.int32)),
            lambda: scaled_gemm(a, b, one, one),
            lambda: scaled_gemm(f8a, f8b, one, one, torch.empty(64, 1, dtype=bf)),
        ],
        "shape": [
            lambda: gemm(a[0], b),
            lambda: gemm(a[:, :5], b),
            lambda: gemm(a, b, out=torch.empty(3, 3, dtype=bf)),
            lambda: gemm(a[:, :0], b[:0]),
            lambda: gated_gemm(a, b, b[:, :32]),
            lambda: gemm(a, b, torch.empty(3, dtype=bf), epilogue=E.bias()),
        ],
        "argument-type": [
            lambda: gemm("a", b),
            lambda: gemm(f8a, f8b),
            lambda: gemm(a, b, epilogue=E.bias()),
            lambda: gated_gemm(a, b, b, keep_out=(a,)),
            lambda: gemm(a, b, out=a, out_dtype=torch.float16),
        ],
        "config": [
            lambda: gemm(a, b, promote=5),
            lambda: gemm(a, b, config=GemmConfig(tile_m=96)),
            lambda: gated_gemm(a, b, b, config=GemmConfig(128, 192)),
            lambda: gemm(a, b, promote=1),
        ],
        "operand-kind": [
            lambda: gemm(a, b, torch.empty(64, 1, dtype=bf), epilogue=E.bias("row")),
            lambda: gemm(a, b, torch.ones(1, 64), epilogue=one_value),
            lambda: gemm(a, b, torch.empty(64, 64), torch.ones(()), 1.0, epilogue=E.addmm(True, "full", "float32")),
        ],
        "activation": [lambda: gated_gemm(a, b, b, "tanh")],
        "fp8-layout": [lambda: gemm(f8a, f8b.t(), out_dtype=bf)],
        "scale-mode": [
            lambda: scaled_gemm(f8a, f8b, torch.ones(64, 2), one),
            lambda: gated_gemm(f8a, f8b, f8b, out_dtype=bf),
            lambda: gated_gemm(a, b, b, scales=(one, one, one)),
            lambda: gated_gemm(f8a, f8b, f8b, out_dtype=bf, scales=(one, one, torch.ones(1, 64))),
        ],
        "scale-result": [lambda: scaled_gemm(f8a, f8b, one, one, None, one, out_dtype=bf)],
        "layout": [
            lambda: gemm(a[:, ::2], b[::2]),
            lambda: gemm(a, b, out=torch.empty(64, 64, dtype=bf).t()),
            lambda: gated_gemm(a, b, b.t()),
        ],
    }


def test_runtime_refusals_of_bad_calls_name_their_rules(monkeypatch):
    monkeypatch.setattr(support, "device_reason", lambda device: None)
    for rule, calls in _bad_runtime_calls().items():
        for call in calls:
            with pytest.raises(ValueError) as info:
                call()
            assert fuzz.classify(str(info.value)) == rule, (rule, str(info.value))
    monkeypatch.undo()
    with pytest.raises(ValueError) as info:  # a CPU tensor
        launch.gemm(torch.empty(64, 64, dtype=torch.bfloat16), torch.empty(64, 64, dtype=torch.bfloat16))
    assert fuzz.classify(str(info.value)) == "device"


def test_logged_refusals_are_captured_with_their_rules():
    import logging

    lowering, scheduler = (logging.getLogger(n) for n in fuzz.REFUSAL_LOGGERS)
    why = Unsupported("operand dtypes torch.float32/torch.float32 (CuteDSL takes bf16 or fp16)", "dtype")
    with fuzz.captured_refusals() as refusals:
        lowering.info("no CuteDSL candidate for %s: %s [%s]", "mm", why, why.rule)
        lowering.info("no CuteDSL candidate for %s: %s", "bmm", str(why))  # the text alone
        scheduler.info("not fusing %s into CuteDSL GEMM %s: %s", "buf2", "buf1", "buf2 is a reduction [reduction]")
        scheduler.info("not fusing %s into CuteDSL GEMM %s: %s", "buf3", "buf1", "the scheduler did not pair them")
        lowering.info("gated %s: no dual kernel: %s [%s]", "silu", Unsupported("measured", "measured-slower"), "x")
        scheduler.info("%s: left to Inductor (no CuteDSL candidate within %.2fx of the fastest)", "buf1", 1.15)
        scheduler.warning("%s: nothing measured; left to Inductor", "buf1 + [buf2]")
        lowering.info("compiled %s in %.2fs", "x", 1.0)  # not a refusal
    assert [(r.where, r.subject, r.rule) for r in refusals] == [
        ("gemm", "mm", "dtype"),
        ("gemm", "bmm", "dtype"),
        ("fusion", "buf2", "reduction"),
        ("fusion", "buf3", "not-paired"),
        ("gated", "silu", "measured-slower"),
        ("selection", "buf1", "measured-slower"),
        ("selection", "buf1 + [buf2]", None),
    ]
    assert lowering.level == logging.NOTSET or lowering.level > logging.DEBUG  # restored
    assert not lowering.handlers or all(not isinstance(h, fuzz._RefusalHandler) for h in lowering.handlers)


def test_a_compile_on_a_fake_hopper_logs_refusals_the_fuzz_classifies():
    """The lowering's own log lines, from a real compile (for an imaginary H200): an fp32
    GEMM and a bf16 one whose output rows are not whole 16-byte units."""
    from fake_hopper import generation

    with fuzz.captured_refusals() as refusals:
        generation(lambda x, w: x @ w, (64, 64), (64, 64), dtype=torch.float32)
        generation(lambda x, w: x @ w, (64, 64), (64, 250), dtype=torch.bfloat16)
    assert [(r.where, r.rule) for r in refusals] == [("gemm", "dtype"), ("gemm", "tma-alignment")], refusals


# --- Programs -----------------------------------------------------------------------------


def test_programs_cover_the_space():
    assert {p.gemm for p in PROGRAMS} == set(fuzz.GEMMS)
    assert {p.dtype for p in PROGRAMS} == {"bfloat16", "float16", "float32"}
    ops = collections.Counter(op for p in PROGRAMS for op in p.ops)
    drawable = set(fuzz.POINTWISE) | set(fuzz.REFUSED_OPS) | set(fuzz.IN_PLACE_OPS)
    assert set(ops) == drawable, drawable - set(ops)
    assert any(p.second for p in PROGRAMS) and any(p.ops.count("keep") > 2 for p in PROGRAMS)
    assert {p.backends for p in PROGRAMS} == {"CUTEDSL", "CUTEDSL,ATEN"} and any(p.cudagraphs for p in PROGRAMS)
    assert any(p.m % 2 for p in PROGRAMS) and any(p.n % 8 or p.k % 8 for p in PROGRAMS)
    assert any(p.beta == 0.0 and p.gemm in ("addmm", "baddbmm") for p in PROGRAMS)
    kinds = collections.Counter(p.kind for p in MODELS)
    assert set(kinds) == set(fuzz.MODEL_KINDS) and min(kinds.values()) >= 15
    forms = {
        ("gated", "two"),
        ("gated", "fused"),
        ("attention", "fused"),
        ("attention", "separate"),
        ("bmm", "baddbmm"),
        ("mlp", "post"),
    }
    assert {(p.kind, p.form) for p in MODELS} >= forms
    assert {p.kind for p in MODELS if p.backward} == {"mlp", "gated", "attention", "bmm"}
    assert {p.kind for p in MODELS if p.dynamic} == {"mlp", "gated", "attention"}
    assert all(len(p.tokens) >= 3 and min(p.tokens) >= 2 for p in MODELS if p.dynamic)
    assert sum(p.cudagraphs for p in MODELS) >= 15
    # torch._scaled_mm takes both scales per tensor or both per row (the runtime cases mix them).
    assert {p.scale_modes for p in MODELS if p.kind == "scaled"} == {("tensor", "tensor"), ("row", "row")}
    assert {p.bias for p in MODELS if p.kind == "scaled"} == {False, True}
    assert {p.fast_accum for p in MODELS if p.kind == "scaled"} == {False, True}


def test_the_gpu_slice_covers_each_kind():
    assert len(fuzz.slice_runtime_specs()) * fuzz.SLICE_CASES_PER_SPEC >= 300
    assert {fuzz.SPECS[i].api for i in fuzz.slice_runtime_specs()} == {"gemm", "gated", "scaled"}
    programs = [fuzz.make_program(i) for i in fuzz.slice_programs()]
    assert len(programs) == 12 and {p.gemm for p in programs} == set(fuzz.GEMMS)
    assert sum(p.cudagraphs for p in programs) >= 2
    models = [fuzz.make_model_program(i) for i in fuzz.slice_model_programs()]
    assert len(models) == 10 and {p.kind for p in models} == set(fuzz.MODEL_KINDS)
    assert any(p.backward for p in models) and any(p.dynamic for p in models) and any(p.cudagraphs for p in models)


def test_drawn_refusals_are_the_only_rules_a_program_may_meet():
    plain = next(
        p
        for p in PROGRAMS
        if not (set(p.ops) & set(fuzz.REFUSED_OPS))
        and p.dtype != "float32"
        and not p.second
        and p.m % 8 == 0
        and p.n % 8 == 0
        and p.k % 8 == 0
        and p.backends == "CUTEDSL"
    )
    assert plain.allowed_rules() == {"not-paired"}
    padded = next(p for p in PROGRAMS if p.m % 8 and not p.second and p.backends == "CUTEDSL")
    assert {"loops", "unsupported-op"} <= padded.allowed_rules()  # pad_mm's partial and masked reads
    for p in PROGRAMS:
        allowed = p.allowed_rules()
        assert all(fuzz.REFUSED_OPS[op] in allowed for op in p.ops if op in fuzz.REFUSED_OPS)
        assert ("dtype" in allowed) == (p.dtype == "float32")
    assert all("reduction" in p.allowed_rules() for p in MODELS if p.kind == "attention")
    for p in MODELS:  # only padded rows read a GEMM output through a masked index (index_expr),
        # and rotary embeddings through a masked concatenation
        padded = p.dynamic or any(size % 8 for size in [*p.tokens, p.batch * min(p.tokens)])
        assert ("unsupported-op" in p.allowed_rules()) == bool(padded or p.rotary), p.label
    # The H200 run's one unexplained refusal: an odd token count's backward read through index_expr.
    odd = next(p for p in MODELS if p.kind == "attention" and p.backward and min(p.tokens) % 8 and not p.dynamic)
    assert "unsupported-op" in odd.allowed_rules()
    assert all(("dtype" in p.allowed_rules()) == p.backward for p in MODELS)  # a backward's bool masks


def _values(p, exact: bool):
    out = []
    for size in p.sizes():
        t = p.inputs("cpu", size)
        names = sorted(t)
        t = {n: v.double() for n, v in t.items()} if exact else t
        out.append(fuzz.evaluate(p, fuzz._eager(p, names, exact), t))
    return out


def test_program_references_run_on_cpu():
    """Every program's float64 reference (and gradients) runs and is finite; the
    programs' eager runs in their own dtype are close to it (the tolerance's base)."""
    sample = PROGRAMS[:60] + [p for p in MODELS[:40] if p.kind != "scaled"]
    for p in sample:
        refs = _values(p, exact=True)
        assert all(torch.isfinite(v).all() for vs in refs for v in vs), p.label
        grads = len(p.grad_names)
        for values, size in zip(refs, p.sizes(), strict=True):
            assert len(values) == len(p.forward(p.inputs("cpu", size))) + grads
        lows = _values(p, exact=False)
        errs = [fuzz._err(g, r) for gs, rs in zip(lows, refs, strict=True) for g, r in zip(gs, rs, strict=True)]
        assert max(errs) < 0.1, (p.label, errs)
    for p in [m for m in MODELS[:20] if m.kind == "scaled"]:  # fp8: the float64 reference only
        assert all(torch.isfinite(v).all() for vs in _values(p, exact=True) for v in vs), p.label


def test_program_errors_catch_wrong_values():
    p = MODELS[1]
    refs = {size: [torch.randn(4, 8, dtype=torch.float64)] for size in p.sizes()}
    eager = {size: [1e-3] for size in p.sizes()}
    right = {size: [[r[0].to(torch.bfloat16)]] for size, r in refs.items()}
    assert fuzz._errors(p, right, refs, eager) == {}
    for bad in (
        lambda r: r * 1.2,
        lambda r: torch.cat([r[:1] * math.nan, r[1:]]),
        lambda r: r.t().reshape(4, 8),
        lambda r: torch.roll(r, 1, 0),
    ):
        wrong = {size: [[bad(r[0]).to(torch.bfloat16)]] for size, r in refs.items()}
        assert fuzz._errors(p, wrong, refs, eager), bad
    # Eager's own error widens the tolerance (to twice it), up to 25% and no further.
    off = {s: [[(r[0] * 1.08).to(torch.bfloat16)]] for s, r in refs.items()}
    assert fuzz._errors(p, off, refs, eager) and not fuzz._errors(p, off, refs, {s: [0.05] for s in p.sizes()})
    far = {s: [[(r[0] * 1.3).to(torch.bfloat16)]] for s, r in refs.items()}
    assert fuzz._errors(p, far, refs, {s: [0.5] for s in p.sizes()})


def test_check_program_runs_a_program_and_flags_refusals_it_was_not_drawn_to_meet():
    """The whole check of a compiled program, on the CPU (Inductor's C++ backend): the
    forward and backward values match float64; every GEMM, refused by the device rule
    (our kernels are for CUDA) and so run by ATen, is an unexplained refusal, which the
    program (drawn for a GPU) may not meet."""
    import dataclasses

    p = dataclasses.replace(MODELS[15], tokens=(9,), hidden=128, inner=256, cudagraphs=False, backends="CUTEDSL")
    assert p.kind == "mlp" and p.backward and "device" not in p.allowed_rules()
    outcome = fuzz.check_program(p, "model", device="cpu")
    assert (outcome.checked, outcome.wrong, outcome.crashes, outcome.stock_failures) == (1, 0, 0, 0), outcome
    gemms = outcome.info["aten_gemms"]
    assert gemms >= 4 and outcome.refused == {"device": gemms} and outcome.unexplained == gemms  # forward and backward
    assert "not a CUDA device" in outcome.failures[0]["detail"] and outcome.info["graphs"] == 1


def test_compiled_programs_allocate_nan_poisoned_buffers(monkeypatch):
    """What a compiled wrapper allocates (through Inductor's ``empty_strided_cuda``,
    here bound to the CPU one) is NaN, padding included; integer buffers are left."""
    guards = torch._C._dynamo.guards
    monkeypatch.setattr(guards, "_empty_strided_cuda", guards._empty_strided_cpu)
    plain = guards._empty_strided_cuda
    with fuzz.nan_poisoned_allocations():
        t = guards._empty_strided_cuda((3, 4), (8, 1), torch.bfloat16)
        ints = guards._empty_strided_cuda((4,), (1,), torch.int32)
    assert guards._empty_strided_cuda is plain
    padded = torch.empty(0, dtype=torch.bfloat16).set_(t.untyped_storage())
    assert padded.numel() == 20 and padded.isnan().all() and ints.dtype == torch.int32


# --- The run --------------------------------------------------------------------------------


def test_plan_deals_every_item_once_and_skips_done_ones():
    slices = fuzz.plan(10000, 200, 100, 8)
    keys = [k for s in slices for k in s]
    assert len(keys) == len(set(keys)) == len(fuzz.runtime_items(10000)) + 300
    assert sum(len(numbers) for _, _, numbers in fuzz.runtime_items(10000)) == 10000
    for j, s in enumerate(slices):  # a spec's cases in one job
        assert all(int(k.split(":")[1]) % 8 == j for k in s if k.startswith("runtime:"))
    assert max(map(len, slices)) - min(map(len, slices)) < 10
    done = set(keys[::3])
    assert {k for s in fuzz.plan(10000, 200, 100, 8, done) for k in s} == set(keys) - done


def _outcome(key, **kw):
    return fuzz.Outcome(key, key.split(":")[0], **kw)


def test_summary_has_the_keys_and_adds_up(tmp_path):
    settings = {"runtime_cases": 100, "programs": 2, "model_programs": 1, "jobs": 1, "budget": None}
    bad = _outcome("program:1", cases=1)
    bad.fail("wrong", "program 1", "rel err 1")
    outcomes = [
        _outcome("runtime:0:0", cases=25, checked=23, refused={"tma-alignment": 2}),
        bad,
        _outcome("model:0", cases=1, checked=1, refused={"reduction": 1}, info={"cutedsl_launches": 2}),
    ]
    result = fuzz.summarize(outcomes, settings, ["program:0"], 12.0)
    for key in (
        "runtime_cases",
        "compiled_programs",
        "model_programs",
        "wrong",
        "crashes",
        "refused_by_rule",
        "unexplained",
        "seed",
        "settings",
        "categories",
        "seconds",
        "failures",
    ):
        assert key in result, key
    assert (result["runtime_cases"], result["compiled_programs"], result["model_programs"]) == (25, 1, 1)
    assert (result["wrong"], result["crashes"], result["unexplained"]) == (1, 0, 0)
    assert result["refused_by_rule"] == {"reduction": 1, "tma-alignment": 2} and result["left_items"] == 1
    assert result["failures"][0]["what"] == "program 1" and result["categories"]["model"]["with_cutedsl_kernel"] == 1
    path = tmp_path / "fuzz.json"
    fuzz.write_json(result, str(path))
    previous = json.loads(path.read_text())
    resumed = fuzz.summarize([_outcome("program:0", cases=1, checked=1)], settings, [], 3.0, previous)
    assert resumed["compiled_programs"] == 2 and resumed["wrong"] == 1 and resumed["seconds"] == 15.0
    assert set(resumed["done_items"]) == {"runtime:0:0", "program:1", "model:0", "program:0"}
    with pytest.raises(SystemExit):
        fuzz.summarize([], {**settings, "runtime_cases": 7}, [], 1.0, result)


def test_a_job_records_each_item_and_skips_what_would_overrun(tmp_path, monkeypatch):
    calls = []

    def run_item(key, settings, device="cuda"):
        calls.append(key)
        return _outcome(key, cases=1, checked=1, seconds=0.1)

    monkeypatch.setattr(fuzz, "run_item", run_item)
    monkeypatch.setattr(fuzz, "nan_poisoned_allocations", lambda: __import__("contextlib").nullcontext())
    log = tmp_path / "job.jsonl"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"items": ["program:0", "model:0"], "settings": {}, "deadline": None, "log": str(log)}))
    assert fuzz.job_main(str(plan)) == 0
    outcomes, open_item = fuzz._read_log(str(log))
    assert [o.key for o in outcomes] == calls == ["program:0", "model:0"] and open_item is None
    log.unlink()
    import time

    deadline = time.time() + 50  # a model program's first guess does not fit; a program's does
    plan.write_text(
        json.dumps({"items": ["model:1", "program:1"], "settings": {}, "deadline": deadline, "log": str(log)})
    )
    assert fuzz.job_main(str(plan)) == 0 and fuzz._read_log(str(log))[0][0].key == "program:1"
    with open(log, "a") as f:  # a job that died mid-item
        f.write(json.dumps({"start": "model:1"}) + "\n" + '{"done": "model')
    assert fuzz._read_log(str(log))[1] == "model:1"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the items must crash: no GPU")
def test_jobs_record_crashes_start_again_and_merge(tmp_path):
    """Job processes on a machine without a GPU: every item crashes (its CUDA context is
    gone), so each job starts again on the rest; every item ends up recorded once."""
    import time

    slices = [["runtime:0:0", "program:0"], ["runtime:1:0"]]
    settings = {"runtime_cases": 100, "programs": 1, "model_programs": 0, "jobs": 2, "budget": None}
    outcomes, left, logs = fuzz.run_jobs(slices, settings, time.time() + 300, str(tmp_path))
    assert sorted(o.key for o in outcomes) == sorted(k for s in slices for k in s) and left == []
    assert all(
        o.crashes == 1 and ("CUDA" in o.failures[0]["detail"] or "NVIDIA" in o.failures[0]["detail"]) for o in outcomes
    )
    result = fuzz.summarize(outcomes, settings, left, 1.0)
    assert (result["crashes"], result["compiled_programs"], result["runtime_cases"]) == (3, 1, 2)
    assert len(list(Path(logs).glob("job*.out"))) == 3  # job 0 started twice, job 1 once


def test_precompile_builds_the_runtime_kernels(tmp_path, capsys):
    pytest.importorskip("cutlass")
    from inductor_cutedsl import config

    with config.patch():
        assert fuzz.main(["--precompile", "--runtime-cases", "1", "--cache-dir", str(tmp_path), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 runtime kernel specs" in out and "1 compiled now" in out and list(tmp_path.glob("*.o"))


def test_the_command_line_helps_without_a_gpu():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.fuzz", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "--runtime-cases" in out.stdout and "--budget" in out.stdout
    assert fuzz.parse_args([]).runtime_cases == 10000 and fuzz.parse_args([]).programs == 200
    assert fuzz.parse_args([]).model_programs == 100 and fuzz.parse_args([]).jobs == 8
    assert math.isclose(fuzz.parse_args(["--budget", "540"]).budget, 540)


def test_an_in_place_consumer_computes_eagers_number_when_compiled():
    """The programs' in-place op, compiled on CPU under max-autotune with the backend on:
    a pass that dropped the unread ``mul_`` would give ``2y`` for ``1.5y``."""
    from torch._inductor import config as ic

    import inductor_cutedsl

    assert inductor_cutedsl.is_enabled()
    program = next(p for p in PROGRAMS if "inplace_scale" in p.ops and p.dtype != "float32")
    t = {k: v.float() for k, v in program.inputs("cpu").items()}
    torch._dynamo.reset()
    with ic.patch(max_autotune_gemm_backends="ATEN"):
        compiled = torch.compile(program.run, mode="max-autotune-no-cudagraphs")
        got = compiled(t)
    want = program.run(t)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_the_rotary_embedding_rotates_each_pair_of_the_head_dim():
    """Llama's rotary embedding pairs column i with i + d/2 and turns the pair by the
    position's angle: norms of the pairs hold, position 0 is unchanged, and the angle
    between two positions' embeddings depends only on their distance."""
    z = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    r = fuzz._rotary(z, exact=True)
    pair_norm = lambda t: t[..., :4] ** 2 + t[..., 4:] ** 2
    torch.testing.assert_close(pair_norm(r), pair_norm(z))
    torch.testing.assert_close(r[..., 0, :], z[..., 0, :])
    same = torch.randn(8, dtype=torch.float64).expand(2, 3, 5, 8)
    rs = fuzz._rotary(same, exact=True)
    dots = (rs[..., 1:, :] * rs[..., :-1, :]).sum(-1)  # neighbours: one distance apart
    torch.testing.assert_close(dots, dots[..., :1].expand_as(dots))
    assert sum(m.rotary for m in MODELS) >= 5 and all(m.kind == "attention" for m in MODELS if m.rotary)
    assert any("rotary" in m.label for m in MODELS)
