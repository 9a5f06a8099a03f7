"""How a long-running command (``serve``, ``mcp``) stops: SIGTERM or Ctrl-C, then exit 0.

Inside :func:`stopped_by_signals`, either signal raises ``SystemExit(0)``, which unwinds through
the ``with`` blocks that close the store (its erasure worker stops at a step boundary, and what
it left resumes at the next open). A server run inside installs its own handlers while it
serves -- stop taking requests, answer those in flight -- and, once done, returns (stdio) or
raises the signal again for these handlers (uvicorn). Ctrl-C is a request to stop here, not an
interruption of a change: it exits 0, not 130.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["STOP_SIGNALS", "stopped_by_signals"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGINT end the block with ``SystemExit(0)``; the old handlers come back after."""
    previous = {sig: signal.signal(sig, _exit_cleanly) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)
