"""What ``torch._scaled_mm`` does with ``scale_result``: multiply, divide or ignore.

Prints, for scale_result in (none, 1/4, 4) and an fp8 or bf16 output, the factor that
best fits the output to the float64 product of the same fp8 operands (unit scales).
Torch's CPU kernel divides an fp8 output by it and ignores it for other outputs (what
``runtime.scaled_gemm`` does); its CUDA kernel (2.11 + CUDA 13, H200) ignores it for
both: the factor reads 1.00 for every scale_result (results/h200-scale-result.txt)."""
import torch

E4 = torch.float8_e4m3fn


def output_factor(device: str, scale_result: float | None, out_dtype: torch.dtype) -> float:
    """The factor that best fits ``torch._scaled_mm``'s output (unit scales) to the
    float64 product of its fp8 operands."""
    torch.manual_seed(0)
    a = torch.randn(64, 128, device=device).to(E4)
    b = torch.randn(64, 128, device=device).to(E4).t()
    one = torch.ones((), device=device)
    kw = {} if scale_result is None else {"scale_result": torch.tensor(scale_result, device=device)}
    y = torch._scaled_mm(a, b, one, one, out_dtype=out_dtype, **kw).double()
    ref = a.double() @ b.double()
    return ((y * ref).sum() / (ref * ref).sum()).item()


def main() -> None:
    for sr in (None, 1 / 4, 4.0):
        for out_dtype in (E4, torch.bfloat16):
            try:
                factor = output_factor("cuda", sr, out_dtype)
            except RuntimeError as exc:
                print(f"scale_result={sr} out={out_dtype}: {str(exc)[:150]}")
                continue
            print(f"scale_result={sr} out={out_dtype}: output / product = {factor:.4f}")


if __name__ == "__main__":
    main()
