"""Helpers for kazoo watches, shared by the ZooKeeper store's parts."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kbroker.metadata.zk")


class CancellableWatch:
    """A kazoo watch stops when its function returns False: this is the flag it reads."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def call_guarded(callback: Callable[..., None], *args: Any) -> None:
    """A failing callback is logged: letting it raise would stop kazoo's watch for good."""
    try:
        callback(*args)
    except Exception:
        log.exception("metadata watch callback %r failed", callback)
