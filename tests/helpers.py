"""Input builders and checks shared by the tests."""
from __future__ import annotations

import re

import torch


def matrix(rows: int, cols: int, major_last: bool, dtype, batch: int | None = None, device="cuda"):
    """Fresh randn matrix (rows x cols), row-major if ``major_last`` else column-major."""
    lead = () if batch is None else (batch,)
    if major_last:
        return torch.randn(*lead, rows, cols, device=device).to(dtype)
    return torch.randn(*lead, cols, rows, device=device).to(dtype).transpose(-1, -2)


def poisoned(shape, dtype, device="cuda"):
    """An output buffer full of NaN, so an unwritten element fails the check."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius-norm error against a float64 reference; NaN never passes."""
    out64 = out.double()
    if not torch.isfinite(out64).all():
        return float("inf")
    return ((out64 - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def cutedsl_launches(code: str) -> int:
    """CuteDSL kernel launches in Inductor's generated wrapper code. Counted at the
    call sites: GEMMs that share a config render the same source, defined once."""
    return len(re.findall(r"^\s+cutedsl_\w+\.run\(", code, flags=re.M))
