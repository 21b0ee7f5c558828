"""Developer tools run from the repository root (``python -m tools.NAME``): not part of
the package, not benchmarks."""
