"""Ctrl-C: exit 130 with one line that says whether anything changed.

A command starts out "nothing was written". A short change (one store call that commits) runs
inside :func:`held`, which keeps Ctrl-C waiting until the call has returned or failed, so the
message can say exactly which: the change either had not started or has committed. A long step
that may be cut short at any point (a purge, a rotation, a restore) says up front, with
:func:`on_interrupt`, what an interruption leaves and what to run next.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = [
    "EXIT_INTERRUPTED",
    "NOTHING_WRITTEN",
    "Interrupted",
    "held",
    "interrupted_message",
    "on_interrupt",
    "reset",
]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process stopped by Ctrl-C
NOTHING_WRITTEN = "interrupted: nothing was written"

# What an interruption means right now. One command runs per process (the CLI is the only
# caller); :func:`reset` starts each invocation afresh (tests invoke many in one process).
_message = [NOTHING_WRITTEN]


class Interrupted(Exception):
    """Ctrl-C reached a command (click would turn a KeyboardInterrupt into a bare Abort)."""


def reset() -> None:
    _message[0] = NOTHING_WRITTEN


def on_interrupt(message: str) -> None:
    """From now on, Ctrl-C prints ``message`` (one line: what is left, and what to run)."""
    _message[0] = message


def interrupted_message() -> str:
    return _message[0]


@contextmanager
def held() -> Iterator[None]:
    """Hold Ctrl-C while the block commits one change, and deliver it once the block is over.

    Inside the block, call :func:`on_interrupt` once the change has committed, to say so. Only
    the main thread can take signals; elsewhere (never the case for the CLI) nothing is held.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pending:  # the change committed (the block returned): report it now, as Ctrl-C
        raise KeyboardInterrupt
