"""Serving one client over stdin and stdout: one JSON-RPC message a line, every line answered.

Each line is read by :func:`.wire.decode`; a message goes to the server, a refusal is answered
at once (the SDK's own stdio reader drops a line its parser refuses, and the client waits until
its own timeout). Blank lines are skipped; a line longer than :data:`MAX_LINE_BYTES` is refused
whole.

While serving, descriptors 0 and 1 point at the null device and at stderr, and the wire is read
and written through private duplicates, so nothing the process prints can corrupt it (as the
SDK's transport does).

Stopping: at the end of input, or on SIGTERM or SIGINT, no further line is read; the requests
in flight are answered (for at most :data:`GRACE_SECONDS`); then the server's input ends, its
connection closes, and :func:`serve_stdio` returns. A second signal stops at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.message import SessionMessage
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from .toolserver import CenotaphMCPServer
from .wire import Refusal, decode

__all__ = ["GRACE_SECONDS", "MAX_LINE_BYTES", "serve_stdio"]

GRACE_SECONDS = 65.0  # the longest tool call (erasure_status with wait_seconds=60) and a margin
MAX_LINE_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE  # what the SDK's HTTP transport takes in one body
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
TOO_LONG = JSONRPCError(
    jsonrpc="2.0",
    id=None,
    error=ErrorData(
        code=INVALID_REQUEST,
        message=f"Invalid Request: the message is longer than {MAX_LINE_BYTES} bytes; a value may be at "
        "most 1 MiB of JSON",
    ),
)
Line = bytes | None  # None: a line that was too long
_log = logging.getLogger("cenotaph.mcp")


def serve_stdio(server: CenotaphMCPServer, on_stop: Callable[[int], None] | None = None) -> None:
    """Serve one client on stdin/stdout until its input ends or a stop signal arrives;
    ``on_stop`` gets the number of requests in flight when the first signal does."""
    main = threading.current_thread() is threading.main_thread()  # only it can take signals
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if main else {}
    try:
        with _claimed_stdio() as (wire_in, wire_out):
            anyio.run(_serve, server, wire_in, wire_out, on_stop or (lambda _: None), main)
    finally:
        for sig, handler in handlers.items():  # asyncio resets what it handled to the default
            signal.signal(sig, handler)


class InFlight:
    """The ids of the requests the server has not answered yet."""

    def __init__(self) -> None:
        self._ids: set[int | str] = set()
        self._empty = anyio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, request_id: int | str) -> None:
        self._ids.add(request_id)
        if self._empty.is_set():
            self._empty = anyio.Event()

    def discard(self, request_id: object) -> None:
        if isinstance(request_id, int | str):
            self._ids.discard(request_id)
        if not self._ids:
            self._empty.set()

    async def drained(self) -> None:
        await self._empty.wait()


async def _serve(
    server: CenotaphMCPServer,
    wire_in: BinaryIO,
    wire_out: BinaryIO,
    on_stop: Callable[[int], None],
    signals: bool,
) -> None:
    lines_in, lines = anyio.create_memory_object_stream[Line](0)
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_writes, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
    flight = InFlight()
    token = anyio.lowlevel.current_token()

    def deliver(line: Line) -> None:
        anyio.from_thread.run(lines_in.send, line, token=token)

    reader = threading.Thread(
        target=_read_lines,
        args=(wire_in, deliver),
        name="cenotaph-mcp-stdin",
        daemon=True,  # it may stay blocked on a read that never returns; it must not hold up exit
    )
    async with anyio.create_task_group() as tg:
        reading, watching = anyio.CancelScope(), anyio.CancelScope()
        if signals:
            tg.start_soon(_watch_signals, watching, reading, tg.cancel_scope, lambda: on_stop(len(flight)))
        tg.start_soon(_write, outgoing, wire_out, flight)
        tg.start_soon(_pump, lines, reading, to_server, server_writes.clone(), flight)
        reader.start()
        async with server_writes:
            await server.serve_streams(server_reads, server_writes)
        watching.cancel()  # the writer ends by itself once it has written every answer


def _read_lines(wire_in: BinaryIO, send: Callable[[Line], object]) -> None:
    """In a daemon thread: each line of input (None for one too long), then b"" at its end."""
    try:
        while True:
            line = wire_in.readline(MAX_LINE_BYTES + 1)
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest of it
                    line = wire_in.readline(MAX_LINE_BYTES)
                send(None)
                continue
            send(line)
            if not line:
                return
    except Exception:  # noqa: BLE001 - the loop has ended (or the input failed): nobody is reading
        return


async def _pump(
    lines: ObjectReceiveStream[Line],
    reading: anyio.CancelScope,
    to_server: ObjectSendStream[SessionMessage | Exception],
    answers: ObjectSendStream[SessionMessage],
    flight: InFlight,
) -> None:
    """Hand each line to the server, or answer it; at the end of input or on a stop signal, wait
    for the answers in flight, then end the server's input."""
    async with to_server, answers:
        with reading:
            async for line in lines:
                if line == b"":
                    break
                with anyio.CancelScope(shield=True):  # a line read is handled whole
                    await _handle(line, to_server, answers, flight)
        with anyio.move_on_after(GRACE_SECONDS):
            await flight.drained()


async def _handle(
    line: Line,
    to_server: ObjectSendStream[SessionMessage | Exception],
    answers: ObjectSendStream[SessionMessage],
    flight: InFlight,
) -> None:
    if line is None:
        await answers.send(SessionMessage(TOO_LONG))
        return
    if not line.strip():
        return
    message = decode(line)
    if isinstance(message, Refusal):
        await answers.send(SessionMessage(message.answer))
        return
    if isinstance(message, JSONRPCRequest):
        flight.add(message.id)
    elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
        flight.discard((message.params or {}).get("requestId"))  # a cancelled request gets no answer
    await to_server.send(SessionMessage(message))


async def _write(outgoing: ObjectReceiveStream[SessionMessage], wire_out: BinaryIO, flight: InFlight) -> None:
    async with outgoing:
        async for item in outgoing:
            data = _encode(item.message)
            if data is not None:
                await anyio.to_thread.run_sync(_write_line, wire_out, data)
            if isinstance(item.message, JSONRPCResponse | JSONRPCError):
                flight.discard(item.message.id)


def _encode(message: JSONRPCMessage) -> bytes | None:
    """A message as the SDK writes it. An answer that cannot be serialized becomes an error with
    its id, so one bad answer never ends the connection; anything else unserializable (the
    server's own request or notification) is dropped, and logged."""
    try:
        return message.model_dump_json(by_alias=True, exclude_unset=True).encode()
    except ValueError:  # pydantic's serialization errors are ValueErrors (depth, lone surrogates)
        if not isinstance(message, JSONRPCResponse | JSONRPCError):
            _log.warning("dropped a %s that could not be written as JSON", type(message).__name__)
            return None
        error = ErrorData(
            code=INTERNAL_ERROR, message="Internal error: the answer could not be written as JSON"
        )
        return Refusal(JSONRPCError(jsonrpc="2.0", id=message.id, error=error)).to_json()


def _write_line(wire_out: BinaryIO, data: bytes) -> None:
    wire_out.write(data + b"\n")
    wire_out.flush()


async def _watch_signals(
    watching: anyio.CancelScope,
    reading: anyio.CancelScope,
    everything: anyio.CancelScope,
    stopping: Callable[[], None],
) -> None:
    with watching, anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for _ in signals:
            if reading.cancel_called:
                everything.cancel()  # a second signal: stop now
                return
            reading.cancel()
            stopping()


@contextmanager
def _claimed_stdio() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The wire's two ends as private descriptors, while 0 reads the null device and 1 writes to
    stderr; restored afterwards. The private descriptors are never closed: the reading thread
    may still be blocked on one."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    try:
        yield os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
