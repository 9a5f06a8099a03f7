"""Round trips to PostgreSQL as the wire sees them: the benchmark's relay (bench/netdelay.py, in
its own process, no delay) between a store and the server, and its count of round trips (a
pipeline of statements sent together is one; each time the client speaks after the server did,
another)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["Wire", "relayed"]

NETDELAY = Path(__file__).resolve().parents[2] / "bench" / "netdelay.py"


class Wire:
    """The relay's control port: how many round trips since the last :meth:`reset`."""

    def __init__(self, dsn: str, port: int) -> None:
        self.dsn = dsn  # the server's address through the relay
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._file = self._sock.makefile("rwb")

    def _ask(self, command: bytes) -> int:
        self._file.write(command + b"\n")
        self._file.flush()
        return int(json.loads(self._file.readline())["round_trips"])

    def round_trips(self) -> int:
        return self._ask(b"stats")

    def reset(self) -> None:
        self._ask(b"reset")

    @contextmanager
    def counting(self) -> Iterator[list[int]]:
        """The round trips of the block, in a list of one left for the caller (filled at exit)."""
        got: list[int] = []
        self.reset()
        yield got
        got.append(self.round_trips())

    def close(self) -> None:
        self._file.close()
        self._sock.close()


@contextmanager
def relayed(dsn: str) -> Iterator[Wire]:
    """The relay in its own process in front of the server of ``dsn`` (a ``postgresql://`` URL);
    the wire's ``dsn`` is the same URL through the relay."""
    url = urlsplit(dsn)
    target = f"{url.hostname or '127.0.0.1'}:{url.port or 5432}"
    user = f"{url.username}@" if url.username else ""
    proc = subprocess.Popen(
        [sys.executable, str(NETDELAY), "--target", target, "--delay-ms", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ports = json.loads(proc.stdout.readline())
        netloc = f"{user}127.0.0.1:{ports['listening']}"
        wire = Wire(urlunsplit(url._replace(netloc=netloc)), ports["control"])
        try:
            yield wire
        finally:
            wire.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
