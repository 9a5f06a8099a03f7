"""Lock contention becomes the project's own error, with advice, and loses nothing."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import cenotaph
from cenotaph.errors import StorageError

SCOPE = "tenant:t/user:u"

HOLD_LOCK = """
import sqlite3, time
c = sqlite3.connect({db!r}, isolation_level=None)
c.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(30)
"""


def test_a_write_blocked_too_long_raises_storage_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "d"
    monkeypatch.setenv("CENOTAPH_BUSY_TIMEOUT_MS", "300")  # read when the connection opens
    store = cenotaph.open(data)
    store.write(SCOPE, "before", 1)
    # another process holds the write lock, as a stuck writer would
    script = textwrap.dedent(HOLD_LOCK.format(db=str(data / "cenotaph.db")))
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        with pytest.raises(StorageError) as caught:
            store.write(SCOPE, "during", 2)
        assert time.monotonic() - started < 10
        message = str(caught.value)
        assert "locked" in message and "retry" in message
        assert "during" not in message  # no caller data in the error
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    # the lock is gone: nothing was half-written and the same store works again
    assert store.read(SCOPE, "during") is None
    got = store.read(SCOPE, "before")
    assert got is not None and got.value == 1
    assert store.write(SCOPE, "after", 3).value == 3
    store.close()
    with contextlib.closing(sqlite3.connect(data / "cenotaph.db")) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
