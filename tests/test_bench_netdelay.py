"""The benchmark's network in a box (bench/netdelay.py): each direction delayed, round trips
counted as the wire sees them (a pipeline of requests sent together is one), in its own process."""

from __future__ import annotations

import json
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


class Control:
    """The relay's control port, spoken as the benchmark speaks it (one line each way)."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._file = self._sock.makefile("rwb")

    def _ask(self, command: bytes) -> dict[str, int]:
        self._file.write(command + b"\n")
        self._file.flush()
        answer: dict[str, int] = json.loads(self._file.readline())
        return answer

    def stats(self) -> dict[str, int]:
        return self._ask(b"stats")

    def reset(self) -> dict[str, int]:
        return self._ask(b"reset")

    def close(self) -> None:
        self._file.close()
        self._sock.close()


DELAY_MS = 25


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def relay() -> Iterator[tuple[int, Control]]:
    echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    echo.daemon_threads = True
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{echo.server_address[1]}"
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "netdelay.py"), "--target", target, "--delay-ms", str(DELAY_MS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ports = json.loads(proc.stdout.readline())
        control = Control(ports["control"])
        yield ports["listening"], control
        control.close()
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        echo.shutdown()
        echo.server_close()


def _exchange(sock: socket.socket, *messages: bytes) -> bytes:
    for message in messages:  # sent back to back: one pipeline
        sock.sendall(message)
    want = sum(len(m) for m in messages)
    got = b""
    while len(got) < want:
        got += sock.recv(65536)
    return got


def test_each_direction_is_delayed_and_round_trips_are_counted(relay: tuple[int, Control]) -> None:
    port, control = relay
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.monotonic()
        assert _exchange(sock, b"ping") == b"ping"
        assert time.monotonic() - started >= 2 * DELAY_MS / 1000  # there and back
        assert _exchange(sock, b"a", b"b", b"c") == b"abc"  # a pipeline: one round trip
        assert _exchange(sock, b"again") == b"again"
    stats = control.stats()
    assert stats["round_trips"] == 3 and stats["connections"] == 1
    assert stats["bytes_up"] == stats["bytes_down"] == len(b"pingabcagain")
    assert control.reset()["round_trips"] == 3 and control.stats()["round_trips"] == 0


def test_the_delay_can_be_changed_while_it_runs(relay: tuple[int, Control]) -> None:
    port, control = relay
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert _exchange(sock, b"before") == b"before"
        assert control._ask(b"delay 200")["round_trips"] == 1  # answers the stats
        started = time.monotonic()
        assert _exchange(sock, b"slower") == b"slower"
        assert time.monotonic() - started >= 2 * 0.2  # there and back, at the new delay
    assert control.stats()["round_trips"] == 2
