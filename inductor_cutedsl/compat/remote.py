"""Inductor's remote caches, which our kernel cache joins when the user turns them on.

Read against ``torch/_inductor/remote_cache.py`` and ``config.py`` of torch 2.11 and 2.15:
``fx_graph_remote_cache`` and ``autotune_remote_cache`` are None (off outside fbcode),
True or False; ``RedisRemoteCacheBackend(cache_id)`` stores bytes by key in the Redis
server that ``TORCHINDUCTOR_REDIS_URL`` or ``TORCHINDUCTOR_REDIS_HOST``/``_PORT`` name,
and after a connection error answers every call with nothing (a server gone away costs
a local build, never an error). fbcode's own backends are not used here.
"""

from __future__ import annotations

import sys
from typing import Any


def enabled() -> bool:
    """Whether the user turned on one of Inductor's remote caches (read from Inductor's
    config where it is imported: a process that never compiles has none)."""
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is None:
        return False
    return bool(getattr(inductor, "fx_graph_remote_cache", None) or getattr(inductor, "autotune_remote_cache", None))


def redis_backend(cache_id: str) -> Any:
    """Inductor's Redis backend (bytes by key); raises where the ``redis`` package is missing."""
    from torch._inductor.remote_cache import RedisRemoteCacheBackend

    return RedisRemoteCacheBackend(cache_id)
