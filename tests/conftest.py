import os
import tempfile

import pytest

# One cache shared by every xdist worker of a run (workers race on keys by design).
os.environ.setdefault(
    "INDUCTOR_CUTEDSL_CACHE_DIR",
    os.path.join(tempfile.gettempdir(), f"inductor_cutedsl_test_cache_{os.getuid()}"),
)

# Our own tests run strict: an internal failure raises instead of falling back to stock
# Inductor (errors.fallback), so that no test passes on the fallback. Tests of the
# fallback itself take the ``lenient`` fixture.
os.environ.setdefault("INDUCTOR_CUTEDSL_STRICT", "1")

# Tests fake different timings for the same shapes: a decision kept by one test must
# not answer for another (tests/test_records.py turns it on for its own cache).
os.environ.setdefault("INDUCTOR_CUTEDSL_PERSIST_DECISIONS", "0")

# The tests read what the backend installed into Inductor (its choices class, the patched
# scheduler) right after `import inductor_cutedsl`: with Inductor imported first, enable()
# installs it all at once. The deferred install of a fresh process (settings when
# Inductor's config is imported, the rest at the first compile) is tested in
# subprocesses (tests/test_import_time.py).
try:
    import torch._inductor.config  # noqa: F401
except ImportError:
    pass

# The GPU suite's kernel specs, for building its carried kernels again after a kernel
# change (tests/helpers.py, record_specs).
if os.environ.get("INDUCTOR_CUTEDSL_TEST_SPECS"):
    from helpers import record_specs

    record_specs(os.environ["INDUCTOR_CUTEDSL_TEST_SPECS"])


@pytest.fixture(autouse=True)
def settings_left_as_found():
    """A test that changes a setting without restoring it makes later tests of the same
    xdist worker run under it (one leaked ``max_configs`` did): each test must leave the
    settings as it found them."""
    try:
        from inductor_cutedsl import config
    except ImportError:
        yield
        return
    before = config.as_dict()
    yield
    after = config.as_dict()
    changed = {name: (before[name], after.get(name)) for name in before if after.get(name) != before[name]}
    for name, (value, _) in changed.items():
        setattr(config, name, value)
    assert not changed, f"the test left settings changed (before, after): {changed}"


@pytest.fixture
def lenient(monkeypatch):
    """The backend as a user runs it: internal failures fall back to stock, with a warning."""
    from inductor_cutedsl import config

    monkeypatch.setattr(config, "strict", False)


def _hopper_gpu() -> str | None:
    """None when a Hopper GPU and the DSL are here, else why GPU tests skip."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if torch.cuda.get_device_capability() != (9, 0):
        return "GPU is not sm_90"
    try:
        import cutlass  # noqa: F401
    except ImportError:
        return "nvidia-cutlass-dsl is not installed"
    return None


@pytest.hookimpl(trylast=True)  # after -m has deselected: the pairs are of tests that run
def pytest_collection_modifyitems(config, items):
    # Long tests first, each followed by a short one. xdist hands tests out in this order,
    # each worker a run of consecutive ones: a minute-long test started last would run
    # alone at the end of the GPU suite, and long tests side by side would run one after
    # another on one worker (a GPU suite once ran all of its long tests on one worker).
    # tools/gpu_run.sh passes --maxschedchunk=1, so that each worker's first run is two
    # tests: one long test each.
    long = [item for item in items if "long" in item.keywords]
    short = [item for item in items if "long" not in item.keywords]
    paired = [test for pair in zip(long, short, strict=False) for test in pair]
    items[:] = paired + long[len(short) :] + short[len(long) :]
    reason = _hopper_gpu()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
