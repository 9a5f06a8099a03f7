"""A loopback TCP relay that delays each direction and counts round trips: a network in a box.

    python bench/netdelay.py --target 127.0.0.1:5432 --delay-ms 1
    {"listening": 40123, "control": 40124, "delay_ms": 1.0}

Every byte a client sends to the ``listening`` port reaches the target ``delay_ms`` later, and every
byte the target answers reaches the client ``delay_ms`` after it left: 1 ms each way is a 2 ms
round trip, an ordinary link between two zones of one region. Order is kept per direction (each
direction is one queue, each chunk forwarded at its arrival time plus the delay), so throughput is
not limited by the delay, only latency, as on a real link.

A **round trip** is counted each time a client starts sending after the server last spoke on that
connection (and at a connection's first bytes): a request-response exchange, however many packets
it takes. A pipeline of statements sent together is one round trip, as it is on the wire.

The ``control`` port answers one line per command: ``stats`` (JSON: round_trips, connections,
bytes each way, since the last reset), ``reset`` (zeroes them, answers the stats before), ``delay
MS`` (each direction's delay from now on; answers the stats), ``quit``.
Run it in its own process: inside the benchmark's process its share of the GIL would distort what
it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

__all__ = ["Counters", "Relay", "main"]


@dataclass
class Counters:
    round_trips: int = 0
    connections: int = 0
    bytes_up: int = 0  # client -> target
    bytes_down: int = 0  # target -> client


class _Link:
    """One client connection: who spoke last decides when a round trip starts."""

    def __init__(self, counters: Counters) -> None:
        self._counters = counters
        self._server_spoke = True  # a connection's first bytes start a round trip

    def up(self, size: int) -> None:
        if self._server_spoke:
            self._counters.round_trips += 1
            self._server_spoke = False
        self._counters.bytes_up += size

    def down(self, size: int) -> None:
        self._server_spoke = True
        self._counters.bytes_down += size


class Relay:
    def __init__(self, target: tuple[str, int], delay_s: float) -> None:
        self.target = target
        self.delay_s = delay_s
        self.counters = Counters()

    async def serve(self, host: str = "127.0.0.1", port: int = 0, control_port: int = 0) -> tuple[int, int]:
        self._server = await asyncio.start_server(self._client, host, port)
        self._control = await asyncio.start_server(self._command, host, control_port)
        return self._server.sockets[0].getsockname()[1], self._control.sockets[0].getsockname()[1]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        _nodelay(writer)
        _nodelay(up_writer)
        self.counters.connections += 1
        link = _Link(self.counters)
        await asyncio.gather(
            self._pump(reader, up_writer, link.up),
            self._pump(up_reader, writer, link.down),
            return_exceptions=True,
        )

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, note: Callable[[int], None]
    ) -> None:
        """Forward ``source`` to ``sink``, each chunk ``delay_s`` after it arrived, in order;
        ``note`` hears each chunk's size on arrival (round trips are counted there)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def forward() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                sink.write(chunk)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()

        forwarder = asyncio.create_task(forward())
        try:
            while True:
                chunk = await source.read(65536)
                if chunk:
                    note(len(chunk))
                queue.put_nowait((time.monotonic() + self.delay_s, chunk))
                if not chunk:
                    break
            await forwarder
        finally:
            forwarder.cancel()
            sink.close()

    async def _command(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := (await reader.readline()).strip():
            if line == b"stats":
                writer.write(json.dumps(asdict(self.counters)).encode() + b"\n")
            elif line == b"reset":
                writer.write(json.dumps(asdict(self.counters)).encode() + b"\n")
                self.counters = _reset(self.counters)
            elif line.startswith(b"delay "):  # a new delay of each direction, in ms, from now on
                self.delay_s = max(0.0, float(line.split()[1])) / 1000
                writer.write(json.dumps(asdict(self.counters)).encode() + b"\n")
            elif line == b"quit":
                writer.write(b"{}\n")
                await writer.drain()
                raise SystemExit(0)
            else:
                writer.write(b'{"error": "commands: stats, reset, delay MS, quit"}\n')
            await writer.drain()
        writer.close()


def _reset(counters: Counters) -> Counters:
    """Zero the counters in place: open links keep counting into the same object."""
    counters.round_trips = counters.connections = counters.bytes_up = counters.bytes_down = 0
    return counters


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Control:
    """The benchmark's side of the control port."""

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", default="127.0.0.1:5432", help="host:port to relay to")
    parser.add_argument("--delay-ms", type=float, default=1.0, help="delay of each direction")
    parser.add_argument("--port", type=int, default=0, help="the relay's port (0: a free one)")
    parser.add_argument("--control-port", type=int, default=0)
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    relay = Relay((host, int(port)), args.delay_ms / 1000)

    async def run() -> None:
        listening, control = await relay.serve(port=args.port, control_port=args.control_port)
        print(json.dumps({"listening": listening, "control": control, "delay_ms": args.delay_ms}), flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        asyncio.run(run())
    sys.stdout.flush()


if __name__ == "__main__":
    main()
