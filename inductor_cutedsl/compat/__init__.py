"""Every use of torch-private (``torch._inductor``, ``torch._dynamo``) API, split by the
Inductor area it adapts, and every difference between the torch releases we support.

Read against torch 2.11 to 2.15, each installed (CI runs the CPU suite on 2.11, 2.14 and
2.15); ``releases.SUPPORTED_TORCH`` states the range. A torch upgrade is a review of
this package: widen the range (and ``dependencies`` in pyproject.toml, which states
the same range) only after the CPU suite passes on the new release.

- ``releases``: which torch releases are supported, and the refusal outside them.
- ``lazy``: Inductor's modules and classes, imported on first use; code that runs when a
  module is imported.
- ``settings``: Inductor's config and choices handler, held in every compiling thread.
- ``environment``: what the install changes in the process environment.
- ``lowerings``: lowering registration and the pre-grad pass.
- ``ir_access``: sizes, strides, layouts and nodes of Inductor's IR while lowering.
- ``autotune``: autotuning choices, their benchmark requests and the benchmark hook.
- ``codegen``: the CUDA scheduling, fusion rules and benchmark modules.

Importing Inductor costs more than a second, so no module here imports it at import time.
"""
