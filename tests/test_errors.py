"""Refusals of ``runtime.gemm`` / ``runtime.gated_gemm`` and epilogue source errors,
without a GPU: each names the argument (or the epilogue and its line) in plain text."""

from __future__ import annotations

import pytest
import torch

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import support

TINY = GemmConfig(128, 128, 1, 1)  # the cheapest kernel to trace


def cpu(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


@pytest.fixture
def any_device(monkeypatch):
    """CPU tensors pass the device check, so the checks after it are reached."""
    monkeypatch.setattr(support, "device_reason", lambda device: None)


def epilogue(name: str, body: str, *operands: E.EpilogueOperand) -> E.Epilogue:
    return E.Epilogue(name, "def epilogue(acc, m, n, l, ops):\n" + body, operands)


def no_ansi(text: str) -> bool:
    return "\x1b" not in text


@pytest.mark.parametrize(
    "args,kwargs,name",
    [
        (([1.0], cpu(8, 8)), {}, "a is a list"),
        ((None, cpu(8, 8)), {}, "a is a NoneType"),
        ((cpu(8, 8), None), {}, "b is a NoneType"),
        ((cpu(8, 8), [[1.0]]), {}, "b is a list"),
        ((cpu(8, 8), cpu(8, 8)), {"out": [0.0]}, "out is a list"),
        ((cpu(8, 8), cpu(8, 8)), {"out_dtype": "bfloat16"}, "out_dtype is a str"),
        ((cpu(8, 8), cpu(8, 8)), {"config": "128x128"}, "config is a str"),
        ((cpu(8, 8), cpu(8, 8)), {"epilogue": "relu"}, "epilogue is a str"),
    ],
)
def test_gemm_refuses_wrong_types_with_a_type_error_naming_the_argument(args, kwargs, name):
    from inductor_cutedsl.runtime import gemm

    with pytest.raises(TypeError, match=name) as info:
        gemm(*args, **kwargs)
    assert isinstance(info.value, ValueError), "every refusal is also a ValueError"


@pytest.mark.parametrize(
    "args,kwargs,needle",
    [
        ((cpu(64, 64), cpu(64, 64)), {}, "a: tensor on cpu"),
        ((cpu(64, 32), cpu(64, 64)), {}, "a has K=32 columns, b has 64 rows"),
        ((cpu(64, 64), cpu(64, 64, dtype=torch.float16)), {}, "a torch.bfloat16 / b torch.float16"),
        ((cpu(2, 64, 64), cpu(64, 64)), {}, "a is 3-D, b is 2-D"),
    ],
)
def test_gemm_refusals_name_the_argument(args, kwargs, needle):
    from inductor_cutedsl.runtime import gemm

    with pytest.raises(ValueError, match="cannot run this GEMM") as info:
        gemm(*args, **kwargs)
    assert needle in str(info.value)


@pytest.mark.usefixtures("any_device")
@pytest.mark.parametrize(
    "operands,kwargs,needle",
    [
        ((), {"out": cpu(64, 72)}, "out: output shape (64, 72)"),
        ((), {"out": cpu(2, 64, 64)}, "out: output shape (2, 64, 64)"),
        ((), {"out": cpu(64, 64).t()}, "out is not row-major"),
        ((), {"out": cpu(64 * 64 + 1)[1:].view(64, 64)}, "out base pointer"),
        ((), {"out_dtype": torch.float64}, "out_dtype; want"),
        ((), {"out": cpu(64, 64), "out_dtype": torch.float32}, "out is torch.bfloat16 but out_dtype"),
        ((), {"config": GemmConfig(96, 128)}, "config 96x128"),
        ((), {"epilogue": E.bias("row")}, "takes 1 operands (bias (row)), got 0"),
        ((cpu(64),), {"epilogue": E.bias("col")}, "operand bias is not a col vector"),
        ((cpu(64, dtype=torch.float16),), {"epilogue": E.bias("row")}, "operand bias must be a bfloat16 tensor, got"),
        ((cpu(64), "2", 1.0), {"epilogue": E.addmm(True, "row")}, "operand alpha is a scalar: want a float, got a str"),
        (([0.0] * 64,), {"epilogue": E.bias("row")}, "operand bias must be a bfloat16 tensor, got a list"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_gemm_refusals_after_the_device_check_name_the_argument(operands, kwargs, needle):
    from inductor_cutedsl.runtime import gemm

    with pytest.raises(ValueError, match="cannot run this GEMM") as info:
        gemm(cpu(64, 64), cpu(64, 64), *operands, **kwargs)
    assert needle in str(info.value)


@pytest.mark.usefixtures("any_device")
def test_gemm_refuses_a_misaligned_b_naming_it():
    from inductor_cutedsl.runtime import gemm

    with pytest.raises(ValueError, match="b leading stride 60"):
        gemm(cpu(64, 64), cpu(64, 60)[:, :56])


@pytest.mark.parametrize(
    "args,kwargs,needle,kind",
    [
        (([1.0], cpu(8, 8), cpu(8, 8)), {}, "a is a list", TypeError),
        ((cpu(8, 8), cpu(8, 8), None), {}, "b_up is a NoneType", TypeError),
        ((cpu(8, 8), cpu(8, 8), cpu(8, 8)), {"act": 3}, "act is a int", TypeError),
        ((cpu(8, 8), cpu(8, 8), cpu(8, 8)), {"keep_out": cpu(8, 8)}, "keep_out is a Tensor", TypeError),
        ((cpu(8, 8), cpu(8, 8), cpu(8, 8)), {"bias_up": 1.0}, "bias_up is a float", TypeError),
        ((cpu(8, 8), cpu(8, 8), cpu(8, 8)), {"act": "tanh"}, "a: tensor on cpu", ValueError),
    ],
)
def test_gated_gemm_refusals_name_the_argument(args, kwargs, needle, kind):
    from inductor_cutedsl.runtime import gated_gemm

    with pytest.raises(kind) as info:
        gated_gemm(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    assert needle in str(info.value), str(info.value)


@pytest.mark.usefixtures("any_device")
@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"act": "tanh"}, "act: activation 'tanh'"),
        ({"b_up": cpu(64, 72)}, "b_gate and b_up differ in shape"),
        ({"b_up": cpu(72, 64)}, "a has K=64 columns, b_up has 72 rows"),
        ({"bias_up": cpu(64, dtype=torch.float64)}, "bias_up is torch.float64"),
        ({"config": GemmConfig(128, 192)}, "config 128x192"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_gated_gemm_refusals_after_the_device_check_name_the_argument(kwargs, needle):
    from inductor_cutedsl.runtime import gated_gemm

    args = {"a": cpu(64, 64), "b_gate": cpu(64, 64), "b_up": cpu(64, 64), **kwargs}
    with pytest.raises(ValueError, match="cannot run this gated GEMM") as info:
        gated_gemm(**args)
    assert needle in str(info.value), str(info.value)


# Epilogue sources: checked when the hook is made (no compile needed) ...


@pytest.mark.parametrize(
    "epi,needle",
    [
        (
            epilogue("unknown_fn", "    x = acc * 2\n    return nosuch(x)\n"),
            "'unknown_fn', line 3: unknown name 'nosuch'",
        ),
        (epilogue("unknown_var", "    return acc + bias\n"), "'unknown_var', line 2: unknown name 'bias'"),
        (epilogue("bad_syntax", "    return acc +\n"), "'bad_syntax', line 2: invalid syntax"),
        (E.Epilogue("no_fn", "def other(acc, m, n, l, ops):\n    return acc\n"), "no `epilogue` function"),
    ],
    ids=lambda x: x.name if isinstance(x, E.Epilogue) else "",
)
def test_epilogue_source_errors_name_the_epilogue_and_line(epi, needle):
    from inductor_cutedsl.kernels.epilogue_math import materialize

    with pytest.raises(ValueError) as info:
        materialize(epi)
    assert needle in str(info.value) and no_ansi(str(info.value))


def test_known_names_pass_the_source_check():
    """Locals, nested helpers, comprehensions, builtins and the namespace are all known."""
    from inductor_cutedsl.kernels.epilogue_math import materialize

    src = (
        "    scale = Float32(0.5)\n"
        "    def twice(v):\n        return v + v\n"
        "    parts = [twice(x) for x in (acc, ops[0])]\n"
        "    return select(m < n, relu(parts[0]), cute.math.exp(parts[1] * scale)) + float(len(parts))\n"
    )
    assert callable(materialize(epilogue("fine", src, E.EpilogueOperand("r", "full"))))


# ... and at trace time (compiled for sm_90a, no GPU needed; each fails within a second).


@pytest.mark.parametrize(
    "epi,needle",
    [
        (
            epilogue("pair_no_out", "    return acc, acc\n"),
            "'pair_no_out', line 2 returns 2 values but declares no `out` operand",
        ),
        (
            epilogue("one_for_two", "    return acc\n", E.EpilogueOperand("pre", "out", "bfloat16")),
            "'one_for_two', line 2 returns one value, but its 1 `out` operand(s) want a tuple of 2",
        ),
        (
            epilogue("bad_attr", "    y = acc * 2\n    return cute.math.nosuch(y)\n"),
            "'bad_attr', line 3: AttributeError",
        ),
        (
            epilogue("bad_index", "    return acc + ops[2]\n", E.EpilogueOperand("r", "row", "bfloat16")),
            "'bad_index', line 2: IndexError",
        ),
    ],
    ids=lambda x: x.name if isinstance(x, E.Epilogue) else "",
)
def test_epilogue_trace_errors_name_the_epilogue(epi, needle, tmp_path):
    from inductor_cutedsl.runtime import KernelCache, KernelSpec
    from inductor_cutedsl.runtime.compiler import build

    with pytest.raises(ValueError) as info:
        build(KernelSpec(TINY, "bfloat16", "bfloat16", "k", "n", epi), KernelCache(tmp_path))
    assert needle in str(info.value) and no_ansi(str(info.value))
    assert not list(tmp_path.rglob("*.o"))


@pytest.mark.usefixtures("any_device")
def test_runtime_gemm_reports_an_epilogue_error_as_a_value_error(monkeypatch, tmp_path):
    """Through ``runtime.gemm`` (the kernel is compiled before any launch)."""
    from inductor_cutedsl import config
    from inductor_cutedsl.runtime import gemm

    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    epi = epilogue("calls_unknown", "    return acc * frobnicate(acc)\n")
    with pytest.raises(ValueError, match=r"epilogue 'calls_unknown', line 2: unknown name 'frobnicate'") as info:
        gemm(cpu(128, 64), cpu(64, 128), config=TINY, epilogue=epi)
    assert no_ansi(str(info.value))
