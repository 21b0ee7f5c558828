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

# A programmatic launch's order, as a kernel's SASS shows it: the waits for the previous
# grid (griddepcontrol.wait: ACQBULK), the triggers of dependents (PREEXIT), the
# global-memory instructions before the first wait, and the L2 tensor prefetches.
LAUNCH_ORDER = textwrap.dedent("""
    MEMORY = ("LDG", "STG", "LD.", "ST.", "ATOM.", "ATOMG", "RED.", "REDG", "UTMA", "UBLK", "CCTL")

    def launch_order(lines):
        waits = [i for i, line in enumerate(lines) if "ACQBULK" in line]
        early = set()
        for line in lines[: waits[0] if waits else len(lines)]:
            words = line.split("*/", 1)[1].split() if "*/" in line else []
            op = words[1] if len(words) > 1 and words[0].startswith("@") else (words[0] if words else "")
            if op.startswith(MEMORY):
                early.add(op.split(".")[0])
        return {"waits": len(waits), "triggers": sum("PREEXIT" in line for line in lines),
                "before_wait": sorted(early), "tensor_prefetches": sum("UTMAPF" in line for line in lines)}
""")


# Runs in a fresh process: the DSL reads CUTE_DSL_KEEP / CUTE_DSL_DUMP_DIR at import.
SCRIPT = LAUNCH_ORDER + textwrap.dedent("""
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
            **launch_order(lines),
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
STREAM_K_SCRIPT = LAUNCH_ORDER + textwrap.dedent("""
    import json, subprocess, sys
    from pathlib import Path
    from inductor_cutedsl.kernels import GemmConfig, epilogue as E
    from inductor_cutedsl.runtime import KernelSpec
    from inductor_cutedsl.runtime.compiler import export_object


    nvdisasm, root = sys.argv[1], Path(sys.argv[2])
    # A dual kernel (two weights, multicast over a 2x1 cluster) first: its launch order.
    dual = KernelSpec(GemmConfig(128, 128, 2, 1, False, True, 1), "bfloat16", "bfloat16", "k", "k", E.gated("silu"),
                      dual=True)
    export_object(dual, root, "dual")
    (cubin,) = (root / "dump").glob("*.cubin")
    lines = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True, check=True).stdout.splitlines()
    dual_order = launch_order(lines)
    cubin.unlink()
    # A decode-sized dual kernel: stream-K over a 128x128 MMA tile (64 output columns).
    dual_sk = KernelSpec(GemmConfig(128, 128, 1, 1, False, True, 1, stream_k=True), "bfloat16", "bfloat16", "k", "k",
                         E.gated("silu"), dual=True)
    export_object(dual_sk, root, "dual_sk")
    (cubin,) = (root / "dump").glob("*.cubin")
    lines = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True, check=True).stdout.splitlines()
    dual_sk_stats = {**launch_order(lines), "spill_stores": sum("STL" in line for line in lines),
                     "peer_loads": sum("LDG.E.128" in line for line in lines)}
    cubin.unlink()
    cfg = GemmConfig(128, 64, 1, 1, False, True, 1, stream_k=True)
    export_object(KernelSpec(cfg, "bfloat16", "bfloat16", "k", "k", E.IDENTITY), root, "sk")
    (cubin,) = (root / "dump").glob("*.cubin")
    lines = subprocess.run([nvdisasm, str(cubin)], capture_output=True, text=True, check=True).stdout.splitlines()
    stores = [line.split("*/", 1)[1].split()[:2] for line in lines if "STG.E.128" in line]
    polls = [i for i, line in enumerate(lines) if "LDG.E.64.STRONG.GPU" in line]
    loads = [i for i, line in enumerate(lines) if "LDG.E.128" in line]
    # The owner's reads of its peers' sums: the loads after the barrier that follows
    # the flags' wait, up to the first add. Each load's predicate, and the instruction
    # after the barrier that last set it: a comparison with a kernel parameter (the
    # problem's M, in a uniform register or the constant bank) keeps the rows past M.
    barrier = next(i for i in range(polls[-1], len(lines)) if "BAR.SYNC" in lines[i]) if polls else 0
    first_add = next((i for i in range(barrier, len(lines)) if "FADD" in lines[i]), len(lines))
    before_add = [i for i in loads if barrier < i < first_add]
    def setter(i, pred):
        for j in range(i - 1, barrier, -1):
            words = lines[j].split("*/", 1)[1].replace(",", " ").split()
            if words and words[0].startswith("ISETP") and words[1] == pred:
                return lines[j]
        return ""
    row_bound = []
    for i in before_add:
        words = lines[i].split("*/", 1)[1].split()
        pred = words[0].lstrip("@!") if words[0].startswith("@") else ""
        row_bound.append(bool(pred) and ("UR" in setter(i, pred) or "c[0x0]" in setter(i, pred)))
    # The first k-tile's wgmma batch and the branch before it: taken past the batch's
    # last wgmma (the one that marks the scoreboard), it skips the whole batch.
    mma = [i for i, line in enumerate(lines) if "GMMA" in line]
    batch_end = next(i for i in mma if "gsb0" in lines[i])
    bra = max(i for i in range(mma[0]) if "BRA" in lines[i])
    target = lines[bra].split("`(")[1].split(")")[0]
    skippable = lines[bra].split("*/", 1)[1].split()[0].startswith("@") and lines[batch_end + 1].strip() == target + ":"
    dummy = sum("GMMA" in line and "RZ, !UPT" in line for line in lines)
    print(json.dumps({"stores": stores, "loads": len(loads), "polls": len(polls), "loads_before_add": len(before_add),
                      "row_bound_loads": sum(row_bound), "skippable_mma": skippable, "dummy_mma": dummy,
                      "order": launch_order(lines), "dual_order": dual_order, "dual_sk": dual_sk_stats}))
""")


@pytest.fixture(scope="module")
def stream_k_stats(tmp_path_factory) -> dict:
    return sass_script_stats(STREAM_K_SCRIPT, tmp_path_factory.mktemp("sk"))


def test_stream_k_partial_sums_travel_only_for_rows_inside_the_problem(stream_k_stats):
    """A decode-sized GEMM (M = 16 in a 128-row tile) fills an eighth of its tiles'
    rows: each CTA's partial sums (a thread's 8 runs of four fp32 values, 128-bit
    accesses) are stored under a predicate, and its owner's loads of them are
    predicated on a comparison with M, so the rows past M move nothing."""
    s = stream_k_stats
    assert len(s["stores"]) == 8, s
    assert all(prefix.startswith(("@P", "@!P")) for prefix, _ in s["stores"]), s
    assert s["row_bound_loads"] == s["loads_before_add"] > 0, s


def test_a_stream_k_owner_reads_every_peer_before_adding_any(stream_k_stats):
    """The owner of a 128x64 tile waits for its peers' flags in one polling loop (one
    thread per peer) and issues the loads of all four peers' runs (4 x 8 128-bit
    loads) before its first add: about two L2 round trips after its mainloop, where
    reading one peer after another cost two per peer."""
    s = stream_k_stats
    assert s["polls"] == 1, s
    assert s["loads"] == s["loads_before_add"] == 32, s


def test_a_warpgroup_whose_rows_are_all_past_m_skips_its_wgmmas(stream_k_stats):
    """A decode-sized GEMM (M <= 64) leaves a cooperative tile's second warpgroup no row
    inside M: a branch on the row bound skips each k-tile's whole wgmma batch, with no
    placeholder wgmma (ptxas adds one, run on both paths, where the batch's commit
    sits outside the branch: a second group per k-tile, which waits out the first)."""
    s = stream_k_stats
    assert s["skippable_mma"] and s["dummy_mma"] == 0, s


def _assert_waits_first(order: dict, prefetches: int) -> None:
    assert order["waits"] == 1 and order["triggers"] == 1, order
    assert set(order["before_wait"]) <= {"UTMAPF", "UTMACCTL"}, order
    assert order["tensor_prefetches"] >= prefetches, order


@pytest.mark.parametrize("name", [*CASES, *PAIRED, *STAGED])
def test_a_programmatic_launch_touches_global_memory_only_after_the_previous_grid(sass_stats, name):
    """Launched as a programmatic dependent, a kernel may run beside the previous kernel,
    whose writes (A, an epilogue input, memory it frees for ours) are not done: before
    its one wait (griddepcontrol.wait) a kernel only prefetches B's tiles and its
    descriptors to L2, which the writes keep coherent. Epilogue inputs loaded from
    global memory, staged by TMA and prefetched to L2 alike: 128x256 tiles over a 1x2
    cluster, 4 k-tiles of B (64 KiB) prefetched before the wait."""
    _assert_waits_first(sass_stats[name], 1)


def test_a_stream_k_or_dual_kernel_waits_for_the_previous_grid_before_its_scratch_or_weights(stream_k_stats):
    """The stream-K kernel's flags and partial sums (memory torch's allocator may have
    just taken back from the previous kernel) and the dual kernel's second weight are
    touched only after the wait; both prefetch their first B k-tiles before it."""
    _assert_waits_first(stream_k_stats["order"], 1)
    _assert_waits_first(stream_k_stats["dual_order"], 2)


def test_a_decode_sized_dual_kernel_sums_its_stream_k_parts_without_spilling(stream_k_stats):
    """A stream-K dual kernel (128x128 MMA tile: gate and up, 64 output columns) reads its
    peers' partial sums of both halves at once (4 peers x 16 runs of four 128-bit
    values: one peer at a time past ``_STREAM_K_LOADS_IN_FLIGHT``), keeps its
    accumulator in registers, and waits for the previous grid before touching memory."""
    s = stream_k_stats["dual_sk"]
    assert s["spill_stores"] == 0 and s["peer_loads"] == 4 * 16, s
    _assert_waits_first(s, 2)
