"""Kernels loaded through the DSL's C runtime (``runtime.native``) on the GPU: the same
numbers as through the DSL, the same persistent grid, and no DSL import on a warm load."""

from __future__ import annotations

import pytest
import torch
from helpers import fresh_json, matrix, poisoned, rel_err

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import native
from inductor_cutedsl.runtime.compiler import build
from inductor_cutedsl.runtime.launch import CompiledGemm, default_cache, spec_for

pytestmark = pytest.mark.gpu

CASES = [  # (config, epilogue, dual): plain, a fused epilogue with a row operand, stream-K, dual
    (GemmConfig(128, 128, 1, 1), E.IDENTITY, False),
    (GemmConfig(128, 256, 2, 1, epi_n=64, epi_buffers=4), E.bias_activation("gelu_tanh", "row"), False),
    (GemmConfig(128, 128, 1, 1, stream_k=True), E.IDENTITY, False),
    (GemmConfig(128, 128, 2, 1, False, True, 1), E.gated("silu"), True),
]


@pytest.mark.parametrize("cfg,epi,dual", CASES, ids=["plain", "bias_gelu", "stream_k", "dual"])
def test_the_native_load_computes_what_the_dsl_load_does(cfg, epi, dual):
    """One built object loaded both ways, launched on the same inputs into outputs
    poisoned with NaN: bit-identical results, within tolerance of float64."""
    m, n, k = 1000, 1024, 776  # rows not a multiple of the tile; K = 8 * 97 (the 16-byte rule)
    a, b = matrix(m, k, True, torch.bfloat16), matrix(k, n, False, torch.bfloat16)
    b_up = matrix(k, n, False, torch.bfloat16) if dual else None
    spec = spec_for(a, b, torch.bfloat16, cfg, epi, dual=dual)
    path, _ = build(spec, default_cache())
    native_gemm = CompiledGemm(spec, str(path))
    dsl_gemm = CompiledGemm(spec, str(path), native_load=False)
    assert native_gemm.native and not dsl_gemm.native
    operands = [torch.randn(n, device="cuda", dtype=torch.bfloat16)] if epi.operands else []
    outs = []
    for g in (native_gemm, dsl_gemm, native_gemm):
        out = poisoned((m, n), torch.bfloat16)
        g(a, b, out, *operands, b_up=b_up)
        outs.append(out)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    acc = a.double() @ b.double()
    if dual:
        ref = torch.nn.functional.silu(acc) * (a.double() @ b_up.double())
    elif epi.operands:
        ref = torch.nn.functional.gelu(acc + operands[0].double(), approximate="tanh")
    else:
        ref = acc
    assert rel_err(outs[0], ref) < 1e-2


@pytest.mark.parametrize("cluster_size", [1, 2, 4])
def test_resident_clusters_match_the_dsls_hardware_info(cluster_size):
    import cutlass.utils

    expected = cutlass.utils.HardwareInfo().get_max_active_clusters(cluster_size)
    assert native.resident_clusters(cluster_size) == expected > 0


def test_a_warm_process_loads_and_runs_our_kernel_without_importing_the_dsl(tmp_path):
    """A kernel built here, then loaded and launched by a fresh process from the same
    cache (as a warm start does): the right numbers, and no ``cutlass`` module imported."""
    cfg = GemmConfig(128, 128, 1, 1)
    a, b = matrix(256, 512, True, torch.bfloat16), matrix(512, 384, True, torch.bfloat16)
    spec = spec_for(a, b, torch.bfloat16, cfg)
    from inductor_cutedsl.runtime.cache import KernelCache

    build(spec, KernelCache(tmp_path))
    code = f"""
        import json, sys, torch
        from inductor_cutedsl import config
        config.cache_dir = {str(tmp_path)!r}
        from inductor_cutedsl.kernels import GemmConfig
        from inductor_cutedsl.runtime.launch import get_gemm, spec_for
        torch.manual_seed(0)
        a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
        spec = spec_for(a, b, torch.bfloat16, GemmConfig(128, 128, 1, 1))
        out = torch.full((256, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
        g = get_gemm(spec)
        g(a, b, out)
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        dsl = sorted(m for m in sys.modules if m.split(".")[0] == "cutlass")
        print(json.dumps({{"err": err, "native": g.native, "dsl": dsl}}))
    """
    out = fresh_json(code)
    assert out["native"] and out["dsl"] == []
    assert out["err"] < 1e-2
