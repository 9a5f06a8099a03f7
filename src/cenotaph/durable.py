"""File steps that survive a power cut once they return (the one place for fsync rules)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync", "write_all", "write_atomically", "write_new"]


def fsync(path: Path) -> None:
    """Make a file's content, or a directory's entries (files created, renamed or removed in it),
    durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a short write is not an error until the next
    write raises one, e.g. ENOSPC)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_atomically(path: Path, body: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``body``: a crash leaves the old file or the new one, never a mix."""
    tmp = temp_name(path, os.getpid())
    tmp.unlink(missing_ok=True)  # a crashed earlier save of this pid; never write through a link
    try:
        _stage(tmp, body, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a half-written copy must not outlive the failure
        raise
    fsync(path.parent)


def write_new(path: Path, body: bytes, mode: int = 0o600) -> None:
    """Create ``path`` holding ``body``, whole or not at all, and never over an existing file or
    through a link (a hard link fails if the name is taken, where a rename would replace it).
    Raises FileExistsError if ``path`` exists."""
    tmp = temp_name(path, os.getpid())
    tmp.unlink(missing_ok=True)
    try:
        _stage(tmp, body, mode)
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync(path.parent)


def _stage(tmp: Path, body: bytes, mode: int) -> None:
    """Write ``body`` to the new file ``tmp`` (never through a link) and make it durable."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        write_all(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path, pid: int) -> Path:
    """Where :func:`write_atomically` stages ``path`` for process ``pid``."""
    return path.with_name(f".{path.name}.{pid}.tmp")
