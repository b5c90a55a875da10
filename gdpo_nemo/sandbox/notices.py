"""Sandbox-wide warnings, each given once per process: a leaf module, so that any sandbox
module (the runtime copies as well as the protocol and runner) can warn without an import circle."""

from __future__ import annotations

import logging
import threading
import warnings

__all__ = ["warn_once"]

log = logging.getLogger("gdpo_nemo.sandbox")
_warned: set[str] = set()
_warn_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """Log `message` and raise it as a RuntimeWarning, the first time `key` comes up in
    this process only (a sandbox-wide condition, not one per run)."""
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)
