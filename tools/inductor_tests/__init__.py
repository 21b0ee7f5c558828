"""PyTorch's own Inductor GEMM tests, stock and with the CuteDSL backend on, compared
test by test (``python -m tools.inductor_tests --help``)."""
