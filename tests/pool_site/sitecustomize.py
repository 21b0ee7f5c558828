"""Imported at start-up by every interpreter with this folder on PYTHONPATH (the pool
scenario and Inductor's compile subprocesses, which inherit the path): Triton gets a
stand-in CUDA driver for sm_90, so kernels compile without a GPU (nothing runs)."""

import os

if os.environ.get("POOL_SCENARIO_FAKE_GPU") == "1":
    import fake_hopper  # tests/ is on PYTHONPATH beside this folder
    from torch._inductor.runtime import triton_helpers
    from triton.runtime.driver import driver

    driver._active = fake_hopper._TritonDriver()
    triton_helpers.set_driver_to_gpu = lambda: None
