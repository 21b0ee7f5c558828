"""Scheduling: fusing pointwise consumers of a CuteDSL GEMM into its epilogue."""
