"""The repository's own promises: CI runs the README's test command; the README is short."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.startswith("    python3 -m venv")]


def test_readme_has_main_job_and_test_commands():
    cmds = readme_commands()
    assert len(cmds) == 2
    assert cmds[0].endswith("-m inductor_cutedsl")
    assert "pytest -n auto" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in [ln.strip() for ln in ci]


def test_readme_stays_a_short_page_for_users():
    """Figures and history belong in docs/performance.md, design in docs/design.md."""
    assert len((ROOT / "README.md").read_bytes()) < 10 * 1024


def test_every_planted_bug_of_the_mutation_run_still_applies():
    """tools/mutation.py patches the package by exact text: a reformat or a refactor that
    moves a bug's text would silently drop it from the run."""
    from tools import mutation

    for bug in mutation.BUGS:
        text = (ROOT / bug.path).read_text()
        assert text.count(bug.old) == 1, f"{bug.name}: its text is found {text.count(bug.old)} times in {bug.path}"
        assert all((ROOT / t.split("::")[0]).exists() for t in bug.tests), bug.name
