"""What identifies one compiled kernel binary, and the key it is cached under."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
from pathlib import Path

from ..arch import dsl_arch
from ..kernels.config import GemmConfig
from ..kernels.epilogue import Epilogue, EpilogueOperand

# Bytes every TMA base pointer and leading stride is compiled to assume.
ALIGNMENT = 16
#: The launch parameters that are GEMM operands (A, B, a dual kernel's up weight): those a
#: generated call may pass as their storage buffers, read through fixed layouts
#: (``generated.launcher``'s ``layouts``).
GEMM_OPERANDS = ("a", "b", "b_up")
KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"


@functools.lru_cache(maxsize=1)
def kernel_source_digest() -> str:
    """Digest of our kernel sources: editing the kernel invalidates the cache."""
    h = hashlib.sha256()
    for path in sorted(KERNEL_DIR.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def dsl_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass-dsl")
    except importlib.metadata.PackageNotFoundError:
        # The GPU machine carries the DSL unpacked on PYTHONPATH, without metadata.
        import cutlass

        return getattr(cutlass, "__version__", "unknown")


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """Everything that changes the generated binary.

    ``dual``: a gated kernel, ``epilogue((A @ B_gate, A @ B_up), ...)``, two B operands
    of one shape and major; its epilogue takes ``acc`` as the (gate, up) pair
    (``kernels.epilogue.gated``)."""

    config: GemmConfig
    ab_dtype: str
    out_dtype: str
    a_major: str  # "k" (row-major A) or "m"
    b_major: str  # "k" (B is K x N column-major) or "n" (row-major B)
    epilogue: Epilogue
    dual: bool = False
    #: fp8 operands: the promotion mode (``kernels.config.PROMOTE_MODES``): 1, 2 or 3
    #: promote the wgmma's partial sums into fp32 every k-tile (PyTorch's
    #: use_fast_accum=False); 0 accumulates in the wgmma only.
    promote: int = 0

    def key(self) -> str:
        parts = (
            kernel_source_digest(),
            self.config.name(),
            self.ab_dtype,
            self.out_dtype,
            self.a_major,
            self.b_major,
            str(ALIGNMENT),
            self.epilogue.fingerprint(),
            dsl_arch(),
            dsl_version(),
            *(("dual",) if self.dual else ()),
            *((f"promote{self.promote}",) if self.promote else ()),
        )
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]

    def symbol(self) -> str:
        """C symbol prefix of the exported entry (unique per key)."""
        return f"icd_{self.key()}"

    def describe(self) -> str:
        return (
            f"{self.config.name()} {self.ab_dtype}->{self.out_dtype} "
            f"A{self.a_major.upper()} B{self.b_major.upper()} epi={self.epilogue.name}"
            + (" dual" if self.dual else "")
            + (f" promote/{self.promote}" if self.promote else "")
        )

    def to_json(self) -> str:
        """A self-contained description, for generated code to rebuild the spec."""
        return json.dumps(
            {
                "config": dataclasses.asdict(self.config),
                "ab_dtype": self.ab_dtype,
                "out_dtype": self.out_dtype,
                "a_major": self.a_major,
                "b_major": self.b_major,
                "epilogue": {
                    "name": self.epilogue.name,
                    "source": self.epilogue.source,
                    "operands": [dataclasses.asdict(op) for op in self.epilogue.operands],
                },
                **({"dual": True} if self.dual else {}),
                **({"promote": self.promote} if self.promote else {}),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> KernelSpec:
        d = json.loads(text)
        epi = d["epilogue"]
        return cls(
            GemmConfig(**d["config"]),
            d["ab_dtype"],
            d["out_dtype"],
            d["a_major"],
            d["b_major"],
            Epilogue(epi["name"], epi["source"], tuple(EpilogueOperand(**o) for o in epi["operands"])),
            d.get("dual", False),
            d.get("promote", 0),
        )
