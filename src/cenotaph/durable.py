"""File steps that survive a power cut once they return (the one place for fsync rules)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync", "write_all", "write_atomically"]


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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        write_all(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync(path.parent)
