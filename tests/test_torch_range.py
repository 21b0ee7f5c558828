"""The torch range: supported releases get the backend and keep torch.compile working
(newer Inductor's demands on a choices class and a custom pass met); any other torch
gets one warning and an untouched Inductor."""

from __future__ import annotations

import json
import pickle
import re
import warnings
from pathlib import Path

import pytest
import torch
from test_import_time import FINGERPRINT, _run
from torch._inductor import config as inductor_config

import inductor_cutedsl
from inductor_cutedsl import config, install
from inductor_cutedsl.compat import lowerings, releases, settings
from inductor_cutedsl.lowering.choices import CuteDSLChoices
from inductor_cutedsl.scheduler.scheduling import CuteDSLFusionChoices

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_states_the_range_the_import_checks():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [d for d in deps if re.match(r"torch\b", d)] == [releases.supported_range_text()]
    assert "nvidia-cutlass-dsl[cu13]==4.8.1" in deps


def test_this_torch_is_supported():
    assert releases.torch_supported(), torch.__version__


@pytest.mark.parametrize(
    "version, release, supported",
    [
        ("2.11.0", (2, 11), True),
        ("2.11.0+cu130", (2, 11), True),
        ("2.13.0+cpu", (2, 13), True),
        ("2.15.0", (2, 15), True),
        ("2.10.1", (2, 10), False),
        ("2.16.0a0+git1234abc", (2, 16), False),
        ("3.0.0", (3, 0), False),
        ("unknown", None, False),
    ],
)
def test_torch_release_and_range(version, release, supported):
    assert releases.torch_release(version) == release
    assert releases.torch_supported(version) is supported


def _inductor_settings() -> dict:
    names = ("max_autotune_gemm_backends", "inductor_choices_class", "pre_grad_custom_pass")
    return {name: getattr(inductor_config, name) for name in names}


@pytest.mark.parametrize("version", ["2.10.0", "2.16.0"])
def test_enable_outside_the_range_warns_once_and_leaves_inductor_untouched(monkeypatch, version):
    inductor_cutedsl.disable()
    try:
        stock = _inductor_settings()
        monkeypatch.setattr(torch, "__version__", version)
        monkeypatch.setattr(releases, "_torch_warned", False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                inductor_cutedsl.enable()
        ours = [w for w in caught if "inductor_cutedsl supports" in str(w.message)]
        assert len(ours) == 1 and issubclass(ours[0].category, RuntimeWarning)
        message = str(ours[0].message)
        assert version in message and releases.supported_range_text() in message
        assert not inductor_cutedsl.is_enabled()
        assert _inductor_settings() == stock
    finally:
        monkeypatch.undo()
        inductor_cutedsl.enable()
    assert inductor_cutedsl.is_enabled()


def test_import_outside_the_range_warns_once_and_torch_compile_works():
    """A fresh process whose torch reports a release outside the range: the import warns
    once, Inductor is exactly as without the package, and torch.compile works."""
    compile_ = "out = torch.compile(lambda a, b: torch.relu(a @ b) + 1)(torch.ones(4, 4), torch.ones(4, 4))\n"
    done = _run(FINGERPRINT + "import torch\n" + compile_ + "print(json.dumps(fingerprint()))")
    assert done.returncode == 0, done.stderr
    stock = json.loads(done.stdout.strip().splitlines()[-1])
    done = _run(
        FINGERPRINT
        + """
import warnings
import torch
torch.__version__ = "2.99.0"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import inductor_cutedsl
    inductor_cutedsl.enable()
"""
        + compile_
        + """
ours = [str(w.message) for w in caught if "inductor_cutedsl supports" in str(w.message)]
print(json.dumps({"warnings": ours, "enabled": inductor_cutedsl.is_enabled(), "out": out[0, 0].item(),
                  "inductor": fingerprint()}))
"""
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen["warnings"]) == 1 and "2.99.0" in seen["warnings"][0]
    assert seen["enabled"] is False and seen["out"] == 5.0
    assert seen["inductor"] == stock


def test_torch_compile_with_the_backend_on_uses_inductors_cache():
    """A fresh process with the backend on: torch.compile (CPU, default mode) works, and
    Inductor's FX graph cache is not bypassed because of our choices class or pass."""
    done = _run("""
import json, os, tempfile
with tempfile.TemporaryDirectory() as cache:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    import torch
    import inductor_cutedsl
    from torch._dynamo.utils import counters
    from torch._inductor import config as c
    with c.patch(fx_graph_cache=True):
        out = torch.compile(lambda a, b: torch.relu(a @ b) + 1)(torch.ones(4, 4), torch.ones(4, 4))
print(json.dumps({"enabled": inductor_cutedsl.is_enabled(), "out": out[0, 0].item(),
                  "counters": dict(counters["inductor"])}))
""")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["enabled"] is True and seen["out"] == 5.0
    assert seen["counters"].get("fxgraph_cache_bypass", 0) == 0, seen["counters"]
    assert seen["counters"].get("fxgraph_cache_miss", 0) == 1, seen["counters"]


@pytest.mark.parametrize("cls", [CuteDSLChoices, CuteDSLFusionChoices])
def test_choices_classes_implement_uuid(cls):
    """Newer Inductor keys its compile cache on the choices handler's uuid() and refuses
    a handler without one; the key names the class and follows our settings."""
    key = cls().uuid()
    assert key == cls().uuid() and pickle.loads(pickle.dumps(key)) == key
    hash(key)
    assert cls.__qualname__ in key[0]
    with config.patch(max_configs=config.max_configs + 1):
        assert cls().uuid() != key
    with config.patch(compile_workers=config.compile_workers + 1):  # how fast, not what
        assert cls().uuid() == key


def test_the_two_choices_classes_have_distinct_uuids():
    assert CuteDSLChoices().uuid() != CuteDSLFusionChoices().uuid()


def test_inductors_own_cache_key_accepts_the_installed_choices_class():
    from torch._inductor import choices

    cls = inductor_config.inductor_choices_class
    assert issubclass(cls, CuteDSLChoices)
    cache_key = getattr(choices, "inductor_choices_cache_key", None)
    if cache_key is None:
        pytest.skip(f"torch {torch.__version__}'s Inductor pickles the class itself")
    assert cache_key(cls) == cls().uuid()


def test_the_deferred_factory_makes_handlers_with_uuid():
    """``_choices`` (the choices 'class' before the rest is installed) makes ours; where
    the backend was disabled meanwhile, a stock handler that has a uuid() too."""
    handler = install._choices()
    assert isinstance(handler, CuteDSLChoices) and callable(handler.uuid)
    with inductor_config.patch(inductor_choices_class=None):  # (monkeypatch's undo hides it on 2.15)
        stock = install._choices()
    assert not isinstance(stock, CuteDSLChoices) and stock.uuid() == settings.stock_choices().uuid()


class _UserPass:
    def __call__(self, graph):
        pass


def _user_pass_with_uuid():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class UserPass(CustomGraphPass):
        def __call__(self, graph):
            pass

        def uuid(self):
            return "user-pass"

    return UserPass()


def _pass_key():
    return "key"


def _noop(graph):
    pass


def test_pre_grad_pass_is_a_custom_graph_pass_with_uuid():
    """Newer Inductor keys its cache on a custom pre-grad pass's uuid() (and runs it after
    the lookup); without one it logs a warning each process. A user's pass without a
    uuid() of its own makes ours None: Inductor then runs both before the lookup."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    installed = inductor_config.pre_grad_custom_pass
    if config.dual_gemm:
        assert isinstance(installed, CustomGraphPass) and installed.uuid() is not None
        assert pickle.loads(pickle.dumps(installed)).uuid() == installed.uuid()

    alone = lowerings._PreGradPasses(None, _noop, _pass_key)
    assert isinstance(alone, CustomGraphPass)
    assert alone.uuid() == ("inductor_cutedsl.pre_grad", (), "key")
    assert lowerings._PreGradPasses(_UserPass(), _noop, _pass_key).uuid() is None
    assert lowerings._PreGradPasses(_user_pass_with_uuid(), _noop, _pass_key).uuid() == (
        "inductor_cutedsl.pre_grad",
        ("user-pass",),
        "key",
    )


def test_pre_grad_pass_runs_a_list_of_user_passes_first():
    seen = []
    passes = lowerings._PreGradPasses([lambda g: seen.append(1), lambda g: seen.append(2)], seen.append, _pass_key)
    passes("graph")
    assert seen == [1, 2, "graph"]


def test_size_hint_and_fusion_benchmark_setting_exist_on_this_release():
    assert hasattr(inductor_config, settings.benchmark_fusion_setting())
    from torch._inductor.sizevars import SizeVarAllocator

    assert hasattr(SizeVarAllocator, "size_hint") or hasattr(SizeVarAllocator, "optimization_hint")
