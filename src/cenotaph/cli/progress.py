"""Progress bars for long work (purge scans, key rotation, restore), on stderr and only for people.

A bar is drawn only when stderr is a terminal, so a script's stderr stays empty on success and
stdout always holds exactly one JSON document. The store reports progress through a ``progress=``
callback taking ``(done, total)``; :func:`progress_bar` yields such a callback, or None when no bar
is drawn (the store then skips the reporting altogether).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["ProgressCallback", "progress_bar", "stderr_is_tty"]

ProgressCallback = Callable[[int, int], None]
Unit = Literal["bytes", "items"]


def stderr_is_tty() -> bool:
    """True when stderr is a terminal (a person is watching); tests patch this."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


@contextmanager
def progress_bar(description: str, *, unit: Unit = "bytes") -> Iterator[ProgressCallback | None]:
    """A transient bar on stderr while the block runs; yields the callback for ``progress=``.

    The bar pulses until the first report arrives, so work that reports nothing (or only at the
    end) still shows that something is happening.
    """
    if not stderr_is_tty():
        yield None
        return
    amount: ProgressColumn = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        amount,
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task(description, total=None)

    last = {"done": 0, "total": 0, "base": 0}  # a scan of several roots restarts at 0 per root

    def report(done: int, total: int) -> None:
        if done < last["done"]:
            last["base"] += last["total"]
        last["done"], last["total"] = done, max(total, done)
        base = last["base"]
        bar.update(task, completed=base + done, total=max(base + total, base + done, 1))

    with bar:
        yield report
