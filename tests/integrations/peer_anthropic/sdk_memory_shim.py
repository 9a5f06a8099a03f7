"""The shim that retargets the Anthropic SDK's own memory-tool tests at CenotaphMemoryTool.

The SDK's tests build ``BetaLocalFilesystemMemoryTool(base_path=...)`` and look at the files it
keeps under ``base_path/memories`` (a snapshot of the directory, or a file they write there
themselves to seed one). The classes below are cenotaph's tools over a fresh store each; the
store is the only place files live, and ``base_path/memories`` is kept as a *mirror* of it so the
tests can look: rewritten from the store after every command, and any regular file a test placed
there is imported into the store before the next command (symlinks are never followed or
imported: a store has none). Nothing the tool returns is read from the mirror.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from anyio.to_thread import run_sync

import cenotaph
from cenotaph.integrations.anthropic import AsyncCenotaphMemoryTool, CenotaphMemoryTool, MemoryFiles

__all__ = ["BetaAsyncLocalFilesystemMemoryTool", "BetaLocalFilesystemMemoryTool"]

SCOPE = "tenant:sdk-tests/user:tester"
_stores: list[tuple[cenotaph.Store, str]] = []
_COMMANDS = ("view", "create", "str_replace", "insert", "delete", "rename", "clear_all_memory", "execute")


@atexit.register
def _close_all() -> None:
    while _stores:
        store, directory = _stores.pop()
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


def _new_store() -> cenotaph.Store:
    directory = tempfile.mkdtemp(prefix="cenotaph-sdk-peer-")
    store = cenotaph.open(directory)
    _stores.append((store, directory))
    return store


class _Mirror:
    def __init__(self, files: MemoryFiles, base_path: str) -> None:
        self.files = files
        self.base_path = Path(base_path)
        self.memory_root = self.base_path / "memories"
        self.memory_root.mkdir(parents=True, exist_ok=True)
        self.exported: dict[str, bytes] = {}

    def import_placed(self) -> None:
        for directory, _, names in os.walk(self.memory_root):
            for name in names:
                path = Path(directory, name)
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
                relative = path.relative_to(self.memory_root).as_posix()
                data = path.read_bytes()
                if self.exported.get(relative) != data:
                    self.files.write_file(f"/memories/{relative}", data.decode("utf-8"))

    def export(self) -> None:
        shutil.rmtree(self.memory_root, ignore_errors=True)
        self.memory_root.mkdir(parents=True, exist_ok=True)
        self.exported = {}
        for parts, record in self.files.files().items():
            target = self.memory_root.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(record.value.encode("utf-8"))
            self.exported["/".join(parts)] = record.value.encode("utf-8")


class BetaLocalFilesystemMemoryTool(CenotaphMemoryTool):
    def __init__(self, base_path: str = "./memory") -> None:
        super().__init__(_new_store(), SCOPE)
        self._mirror = _Mirror(self.files, base_path)
        self.base_path = self._mirror.base_path
        self.memory_root = self._mirror.memory_root


class BetaAsyncLocalFilesystemMemoryTool(AsyncCenotaphMemoryTool):
    def __init__(self, base_path: str = "./memory") -> None:
        super().__init__(_new_store(), SCOPE)
        self._mirror = _Mirror(self.files, base_path)
        self.base_path = self._mirror.base_path
        self.memory_root = _AsyncRoot(self._mirror.memory_root)


class _AsyncRoot(type(Path())):  # type: ignore[misc]
    """The mirror's root as the async tool's tests use it: a path whose is_dir is awaitable."""

    async def is_dir(self) -> bool:
        return await run_sync(Path(self).is_dir)


def _mirrored_sync(name: str) -> Any:
    command = getattr(CenotaphMemoryTool, name)

    def run(self: BetaLocalFilesystemMemoryTool, *args: Any) -> Any:
        self._mirror.import_placed()
        try:
            return command(self, *args)
        finally:
            self._mirror.export()

    return run


def _mirrored_async(name: str) -> Any:
    command = getattr(AsyncCenotaphMemoryTool, name)

    async def run(self: BetaAsyncLocalFilesystemMemoryTool, *args: Any) -> Any:
        await run_sync(self._mirror.import_placed)
        try:
            return await command(self, *args)
        finally:
            await run_sync(self._mirror.export)

    return run


for _name in _COMMANDS:
    setattr(BetaLocalFilesystemMemoryTool, _name, _mirrored_sync(_name))
    setattr(BetaAsyncLocalFilesystemMemoryTool, _name, _mirrored_async(_name))
