"""The package's layering, read from its imports: kernels <- runtime <- lowering <-
scheduler <- install and the command line, with the settings, errors, timing, the
target and the torch adapters (compat) at the ground floor; nothing in the package
imports the benchmarks or the tools; no module but the kernel exceeds 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "inductor_cutedsl"

#: Floor of each part of the package: a module may import only from its floor and below.
FLOORS = {
    "arch": 0,
    "config": 0,
    "errors": 0,
    "timing": 0,
    "compat": 0,
    "kernels": 1,
    "runtime": 2,
    "lowering": 3,
    "scheduler": 4,
    "install": 5,
    "__init__": 6,
    "cli": 7,
    "__main__": 8,
}
#: Modules whose size is the kernel's own: one warp-specialized kernel reads best whole.
LONG_ALLOWED = {"kernels/sm90_gemm.py"}
MAX_LINES = 600


def part_of(module: str) -> str:
    """The part of module ``a.b`` (under the package), or of a path ``a/b.py`` relative to it: ``a``."""
    return module.removesuffix(".py").replace("/", ".").split(".")[0]


def imports(path: Path) -> list[tuple[str, int]]:
    """(absolute module under inductor_cutedsl, line) of every import in ``path``,
    including those inside functions."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    package = list(rel.parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join([*base, *([node.module] if node.module else [])])
                names = (
                    [f"{target}.{a.name}" if target else a.name for a in node.names] if not node.module else [target]
                )
            elif node.module and node.module.split(".")[0] in ("inductor_cutedsl", "benchmarks", "tools"):
                names = [node.module]
            else:
                continue
            found += [(name, node.lineno) for name in names]
        elif isinstance(node, ast.Import):
            found += [
                (a.name, node.lineno)
                for a in node.names
                if a.name.split(".")[0] in ("inductor_cutedsl", "benchmarks", "tools")
            ]
    return found


def package_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_parts_are_known():
    parts = {part_of(str(p.relative_to(PACKAGE))) for p in package_modules()}
    assert parts == set(FLOORS), "a new part of the package needs its floor in FLOORS"


@pytest.mark.parametrize("path", package_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_up_a_floor(path):
    own = part_of(str(path.relative_to(PACKAGE)))
    for module, line in imports(path):
        root = module.split(".")[0]
        assert root not in ("benchmarks", "tools"), f"{path.name}:{line} imports {module}"
        module = module.removeprefix("inductor_cutedsl.").removeprefix("inductor_cutedsl")
        if not module:
            continue  # `import inductor_cutedsl` (the package face) from the command line
        target = part_of(module)
        if target not in FLOORS:  # a name of the package face (`from .. import disable`)
            target = "__init__"
        assert FLOORS[target] <= FLOORS[own], f"{path.relative_to(PACKAGE)}:{line} ({own}) imports {module} ({target})"


def test_the_floor_rule_catches_an_import_up(tmp_path, monkeypatch):
    """The check itself: a runtime module importing the scheduler is caught."""
    fake = PACKAGE / "runtime" / "launch.py"
    source = fake.read_text() + "\nfrom ..scheduler import decisions\n"
    monkeypatch.setattr(
        Path, "read_text", lambda self, *a, **k: source if self == fake else Path.read_bytes(self).decode()
    )
    with pytest.raises(AssertionError, match=r"runtime/launch.py:\d+ \(runtime\) imports scheduler"):
        test_no_import_runs_up_a_floor(fake)


def test_modules_stay_small():
    long = {
        str(p.relative_to(PACKAGE)): n for p in package_modules() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert set(long) <= LONG_ALLOWED, long
