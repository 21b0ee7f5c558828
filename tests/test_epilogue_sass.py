"""Compiled epilogues read their operands efficiently (sm_90a SASS, no GPU needed).

A per-element branch (an IEEE division's slow path was one) makes each of a
thread's operand loads wait its full latency in turn: ``silu(acc) * gate`` fused
ran at twice the unfused GEMM's time on the H200. Checked on the disassembly of
real kernels (128x256 cooperative tile: 128 accumulator elements per thread), which
also prefetch the full operand's lines to L2 before the epilogue. An operand declared
for pairs takes half the load instructions (4-byte loads); one staged through shared
memory (TMA, then ldmatrix) takes none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CASES = {
    "relu_residual": "relu(acc) + ops[0]",
    "silu_gate": "silu(acc) * ops[0]",
    "divide_by_operand": "fdiv(acc, ops[0] + Float32(2.0))",
    "reciprocal": "reciprocal(cute.math.abs(acc) + ops[0])",
}
# The same epilogues with the operand declared for paired (4-byte) loads, and staged
# through shared memory by TMA.
PAIRED = [f"{name}_pairs" for name in CASES]
STAGED = [f"{name}_staged" for name in CASES]

# Runs in a fresh process: the DSL reads CUTE_DSL_KEEP / CUTE_DSL_DUMP_DIR at import.
SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    from inductor_cutedsl.kernels import Epilogue, EpilogueOperand, GemmConfig
    from inductor_cutedsl.runtime import KernelSpec
    from inductor_cutedsl.runtime.compiler import export_object

    cases, nvdisasm, root = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    dump = Path(os.environ["CUTE_DSL_DUMP_DIR"])
    stats = {}
    for (name, expr), flavour in [(c, f) for c in cases.items() for f in ("", "_pairs", "_staged")]:
        for old in dump.glob("*"):
            old.unlink()
        gate = EpilogueOperand("g", "full", "bfloat16", flavour == "_pairs", flavour == "_staged")
        name += flavour
        epi = Epilogue(name, f"def epilogue(acc, m, n, l, ops):\\n    return {expr}\\n", (gate,))
        spec = KernelSpec(GemmConfig(128, 256, 1, 2), "bfloat16", "bfloat16", "k", "k", epi)
        export_object(spec, root, name)
        (cubin,) = dump.glob("*.cubin")
        sass = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True, check=True).stdout
        lines = sass.splitlines()
        loads = [i for i, line in enumerate(lines) if "LDG.E" in line]
        stats[name] = {
            "loads": len(loads),
            "two_byte_loads": sum("LDG.E.U16" in line for line in lines),
            "branch_regions": sum("BSSY" in line for line in lines),
            "l2_prefetches": sum("CCTL.E.PF2" in line for line in lines),
            "pipelined_wgmma_waits": sum("WARPGROUP.DEPBAR.LE gsb0, 0x1" in line for line in lines),
            "lines_per_load": (loads[-1] - loads[0]) / len(loads) if loads else 0.0,
            "smem_matrix_loads": sum("LDSM" in line for line in lines),
            "spill_stores": sum("STL" in line for line in lines),
        }
    print(json.dumps(stats))
""")


def _nvdisasm() -> Path:
    import triton  # torch's dependency ships the CUDA binary tools

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"


def sass_script_stats(script: str, root: Path, *args: str) -> dict:
    """Run ``script`` in a fresh process, its cubins kept in ``root/dump``, with
    ``args``, the nvdisasm path and ``root`` as arguments; the JSON it prints last."""
    tool = _nvdisasm()
    if not tool.exists():
        pytest.skip(f"no nvdisasm at {tool}")
    repo = Path(__file__).resolve().parents[1]
    (root / "dump").mkdir()
    env = {
        **os.environ,
        "CUTE_DSL_KEEP": "cubin",
        "CUTE_DSL_DUMP_DIR": str(root / "dump"),
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script, *args, str(tool), str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sass_stats(tmp_path_factory) -> dict:
    return sass_script_stats(SCRIPT, tmp_path_factory.mktemp("sass"), json.dumps(CASES))


@pytest.mark.parametrize("name", CASES)
def test_operand_loads_issue_together(sass_stats, name):
    s = sass_stats[name]
    assert s["loads"] == 128, s  # one per accumulator element of the thread
    assert s["branch_regions"] == 0, f"per-element branches serialize the loads: {s}"
    # Batched, the loads sit a few address instructions apart (6-10 seen); serialized
    # behind each element's math they were 30-35 apart.
    assert s["lines_per_load"] < 15, s


@pytest.mark.parametrize("name", PAIRED)
def test_paired_operand_loads_are_half_as_many_and_issue_together(sass_stats, name):
    s = sass_stats[name]
    assert s["loads"] == 64 and s["two_byte_loads"] == 0, s  # one 4-byte load per column pair
    assert s["branch_regions"] == 0 and s["lines_per_load"] < 15, s


@pytest.mark.parametrize("name", STAGED)
def test_staged_operand_is_read_from_shared_memory(sass_stats, name):
    """No global load or L2 prefetch of the operand is left: ldmatrix reads it from the
    shared-memory buffers the producer's TMA filled; and nothing spills."""
    s = sass_stats[name]
    assert s["loads"] == 0 and s["l2_prefetches"] == 0, s
    assert s["smem_matrix_loads"] >= 4 and s["spill_stores"] == 0, s  # >= one per sub-tile


@pytest.mark.parametrize("name", [*CASES, *PAIRED, *STAGED])
def test_mainloop_keeps_a_wgmma_batch_in_flight(sass_stats, name):
    """ptxas serializes wgmma (waits for each batch at once) when anything else reads
    accumulator registers inside the pipeline, e.g. values it chose to keep there: then
    no wait for "all but one batch" (DEPBAR.LE gsb0, 0x1) is left in the kernel."""
    assert sass_stats[name]["pipelined_wgmma_waits"] >= 1, sass_stats[name]


@pytest.mark.parametrize("name", [*CASES, *PAIRED])
def test_full_operand_lines_are_prefetched_to_l2(sass_stats, name):
    # Per thread: 2 rows x (256 columns / 64 columns per 128-byte line) of the gate.
    assert sass_stats[name]["l2_prefetches"] == 8, sass_stats[name]


# A stream-K kernel's partial sums: which instructions move them between CTAs.
STREAM_K_SCRIPT = textwrap.dedent("""
    import json, subprocess, sys
    from pathlib import Path
    from inductor_cutedsl.kernels import GemmConfig, epilogue as E
    from inductor_cutedsl.runtime import KernelSpec
    from inductor_cutedsl.runtime.compiler import export_object

    nvdisasm, root = sys.argv[1], Path(sys.argv[2])
    cfg = GemmConfig(128, 64, 1, 1, False, True, 1, stream_k=True)
    export_object(KernelSpec(cfg, "bfloat16", "bfloat16", "k", "k", E.IDENTITY), root, "sk")
    (cubin,) = (root / "dump").glob("*.cubin")
    lines = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True, check=True).stdout.splitlines()
    stores = [line.split("*/", 1)[1].split()[:2] for line in lines if "STG.E.128" in line]
    loads = [i for i, line in enumerate(lines) if "LDG.E.128" in line]
    # The branch that skips the loads: the last one before them, after the barrier
    # that follows the wait for the peer's flag (else it is the wait's own loop).
    branches = [i for i, line in enumerate(lines[: loads[0]]) if "BRA" in line] if loads else []
    barrier = max((i for i, line in enumerate(lines[: loads[0]]) if "BAR.SYNC" in line), default=-1)
    last = lines[branches[-1]].split("*/", 1)[1].split() if branches else [""]
    guarded = bool(branches) and branches[-1] > barrier and last[0].startswith("@")
    # The first k-tile's wgmma batch and the branch before it: taken past the batch's
    # last wgmma (the one that marks the scoreboard), it skips the whole batch.
    mma = [i for i, line in enumerate(lines) if "GMMA" in line]
    batch_end = next(i for i in mma if "gsb0" in lines[i])
    bra = max(i for i in range(mma[0]) if "BRA" in lines[i])
    target = lines[bra].split("`(")[1].split(")")[0]
    skippable = lines[bra].split("*/", 1)[1].split()[0].startswith("@") and lines[batch_end + 1].strip() == target + ":"
    dummy = sum("GMMA" in line and "RZ, !UPT" in line for line in lines)
    print(json.dumps({"stores": stores, "loads": len(loads), "guarded_loads": guarded, "skippable_mma": skippable,
                      "dummy_mma": dummy}))
""")


def test_stream_k_partial_sums_travel_only_for_rows_inside_the_problem(tmp_path):
    """A decode-sized GEMM (M = 16 in a 128-row tile) fills an eighth of its tiles'
    rows: each CTA's partial sums (a thread's 8 runs of four fp32 values, 128-bit
    accesses) are stored under a predicate and read behind a branch, both on the row
    bound, so the rows past M move nothing."""
    s = sass_script_stats(STREAM_K_SCRIPT, tmp_path)
    assert len(s["stores"]) == 8 and s["loads"] == 8, s
    assert all(prefix.startswith(("@P", "@!P")) for prefix, _ in s["stores"]), s
    assert s["guarded_loads"], s


def test_a_warpgroup_whose_rows_are_all_past_m_skips_its_wgmmas(tmp_path):
    """A decode-sized GEMM (M <= 64) leaves a cooperative tile's second warpgroup no row
    inside M: a branch on the row bound skips each k-tile's whole wgmma batch, with no
    placeholder wgmma (ptxas adds one, run on both paths, where the batch's commit
    sits outside the branch: a second group per k-tile, which waits out the first)."""
    s = sass_script_stats(STREAM_K_SCRIPT, tmp_path)
    assert s["skippable_mma"] and s["dummy_mma"] == 0, s
