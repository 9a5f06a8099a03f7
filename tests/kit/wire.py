"""Round trips to PostgreSQL as the wire sees them: the benchmark's relay (bench/netdelay.py, in
its own process) between a store and the server, and its count of round trips (a
pipeline of statements sent together is one; each time the client speaks after the server did,
another)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["Wire", "relayed", "settle"]

NETDELAY = Path(__file__).resolve().parents[2] / "bench" / "netdelay.py"
# while counting, each direction is delayed, as on a network: psycopg may end a pipeline with a
# flush request right after its sync, which then always leaves before the server's answer arrives
# (within the same round trip, as it costs); undelayed, the answer may come first on a busy
# machine and the wire would count that flush as the client speaking once more
COUNTING_DELAY_MS = 25


class Wire:
    """The relay's control port: how many round trips since the last :meth:`reset`."""

    def __init__(self, dsn: str, port: int) -> None:
        self.dsn = dsn  # the server's address through the relay
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._file = self._sock.makefile("rwb")

    def _ask(self, command: bytes) -> dict[str, int]:
        self._file.write(command + b"\n")
        self._file.flush()
        stats: dict[str, int] = json.loads(self._file.readline())
        return stats

    def round_trips(self) -> int:
        return self._ask(b"stats")["round_trips"]

    def reset(self) -> None:
        self._ask(b"reset")

    def delay(self, ms: float) -> None:
        """Each direction delayed ``ms`` from now on."""
        self._ask(b"delay %g" % ms)

    @contextmanager
    def counting(self) -> Iterator[list[int]]:
        """The round trips of the block, in a list of one left for the caller (filled at exit).
        A connection opened meanwhile (a pool growing in the background) would add its own
        handshake: refused, so a count is the operation's alone."""
        got: list[int] = []
        self.delay(COUNTING_DELAY_MS)
        self.reset()
        try:
            yield got
        finally:
            stats = self._ask(b"stats")
            self.delay(0)
        assert stats["connections"] == 0, (
            "a connection opened while counting: the count is not the operation's"
        )
        got.append(stats["round_trips"])

    def close(self) -> None:
        self._file.close()
        self._sock.close()


@contextmanager
def relayed(dsn: str) -> Iterator[Wire]:
    """The relay in its own process in front of the server of ``dsn`` (a ``postgresql://`` URL);
    the wire's ``dsn`` is the same URL through the relay, undelayed but while counting."""
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


def settle(pool: Any, timeout: float = 30.0) -> None:
    """Wait until a psycopg pool is not opening a connection in the background (it grows after a
    caller waited for one), so that no handshake lands in a count."""
    deadline = time.monotonic() + timeout
    while pool.get_stats().get("pool_size", 0) != pool.get_stats().get("pool_available", 0) or getattr(
        pool, "_growing", False
    ):
        if time.monotonic() > deadline:
            raise AssertionError("the pool kept opening connections")
        time.sleep(0.01)
