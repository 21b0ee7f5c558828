"""pytest plugin (benchmarks/device_session.sh steps close and order-probe): print each Triton
kernel's autotune-cache creation (the kernel names, and the frames that asked for it) and
each remote-cache get (hit or miss) and put, with its key's first characters."""
import re
import traceback

from torch._inductor import remote_cache as rc
from torch._inductor.runtime import autotune_cache as ac

_orig = ac.AutotuneCache.create


def _create(inductor_meta, filename, configs_hash):
    cache = _orig(inductor_meta, filename, configs_hash)
    try:
        src = open(filename).read()
    except OSError:
        src = ""
    names = re.findall(r"def (triton_\w+)", src)
    frames = [f"{f.filename.split('/')[-1]}:{f.lineno}:{f.name}" for f in traceback.extract_stack()[:-1]
              if any(s in f.filename for s in ("inductor_cutedsl", "select_algorithm", "scheduler.py", "compile_fx", "codecache", "async_compile"))]
    print(f"[autotune-cache] {names} remote={bool(cache and cache.remote_cache)} via {frames[-8:]}", flush=True)
    return cache


ac.AutotuneCache.create = staticmethod(_create)


_get, _put = rc.RemoteCache.get, rc.RemoteCache.put


def _logged_get(self, key):
    value = _get(self, key)
    print(f"[remote-cache] {type(self).__name__} get {key[:12]} {'hit' if value is not None else 'miss'}", flush=True)
    return value


def _logged_put(self, key, value):
    print(f"[remote-cache] {type(self).__name__} put {key[:12]}", flush=True)
    return _put(self, key, value)


rc.RemoteCache.get, rc.RemoteCache.put = _logged_get, _logged_put
