"""Fixtures for the MCP server's tests: real stores, the SDK's own ``Client``, real processes.

``mcp_store`` is a store in a fresh data directory (a real SQLite file; purging in each forget,
which keeps the in-memory tests short -- ``cenotaph mcp`` itself runs the background worker);
``memory_client(store, scope, prefix)`` connects the SDK's ``Client`` in memory to a memory
server over it; ``cli_data`` is a data directory made by ``cenotaph init`` for subprocesses;
``spawn_http(...)`` starts a real ``cenotaph mcp --transport streamable-http`` on a free
loopback port and yields its URL (``spawned_http`` the process too); :class:`RawStdio` is a real
``cenotaph mcp`` over stdio spoken to line by line. :class:`Tools` wraps a client: ``ok`` asserts
a call succeeded and returns its structured content, ``refused`` asserts a one-line tool error
and returns its text, ``until_verified`` polls ``erasure_status`` (never asking it to purge or
wait) until the request is verified.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

import cenotaph
from cenotaph.service.mcp.confinement import Confinement
from cenotaph.service.mcp.knowledge_graph import knowledge_graph_server
from cenotaph.service.mcp.memory import memory_server

TENANT = "tenant:acme"
USER = f"{TENANT}/user:alice"
SESSION = f"{USER}/session:s1"
CENOTAPH = str(Path(sys.executable).with_name("cenotaph"))


class Tools:
    """Calls through one MCP client, with the assertions every test makes."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, name: str, **arguments: Any) -> CallToolResult:
        return await self.client.call_tool(name, arguments)

    async def ok(self, name: str, **arguments: Any) -> dict[str, Any]:
        result = await self.call(name, **arguments)
        assert not result.is_error, result.content
        assert result.structured_content is not None
        text = result.content[0].text  # type: ignore[union-attr]
        assert text, "every result is readable as text too"
        content: dict[str, Any] = result.structured_content
        return content

    async def refused(self, name: str, **arguments: Any) -> str:
        result = await self.call(name, **arguments)
        assert result.is_error, f"{name} should have been refused: {result.structured_content}"
        assert len(result.content) == 1
        text = result.content[0].text  # type: ignore[union-attr]
        assert_one_line(text)
        return text

    async def until_verified(self, request_id: str, timeout: float = 90) -> dict[str, Any]:
        """erasure_status, asked without wait_seconds (which would nudge the purge), until the
        request is verified; fails at ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            status = await self.ok("erasure_status", request_id=request_id)
            if status["verified"]:
                return status
            assert time.monotonic() < deadline, f"not verified within {timeout} s: {status['gaps']}"
            await anyio.sleep(0.05)


def assert_one_line(text: str) -> None:
    assert text and "\n" not in text, f"a tool error is one line: {text!r}"
    assert "Traceback" not in text and 'File "' not in text, text


@pytest.fixture
def mcp_store(tmp_path: Path) -> Iterator[cenotaph.Store]:
    # as `cenotaph mcp` opens it: a forget purges and verifies before the tool answers
    with cenotaph.open(tmp_path / "data", auto_purge="sync") as store:
        yield store


@contextlib.asynccontextmanager
async def memory_client(
    store: cenotaph.Store, scope: str = SESSION, prefix: str | None = USER, **client: Any
) -> AsyncIterator[Tools]:
    server = memory_server(store, Confinement.of(scope, prefix))
    async with Client(server, raise_exceptions=True, **client) as connected:
        yield Tools(connected)


@contextlib.asynccontextmanager
async def graph_client(store: cenotaph.Store, prefix: str = USER) -> AsyncIterator[Tools]:
    async with Client(
        knowledge_graph_server(store, Confinement.of(None, prefix)), raise_exceptions=True
    ) as c:
        yield Tools(c)


@pytest.fixture
def cli_data(tmp_path: Path) -> Path:
    data = tmp_path / "cli-data"
    subprocess.run([CENOTAPH, "init", "--data", str(data)], check=True, capture_output=True)
    return data


def stdio_params(data: Path, *args: str, env: Mapping[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=CENOTAPH, args=["mcp", "--data", str(data), *args], env={**os.environ, **(env or {})}
    )


@contextlib.contextmanager
def spawn_http(data: Path, *args: str, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A real ``cenotaph mcp`` listening on a free loopback port; yields its URL, then stops it."""
    with spawned_http(data, *args, env=env) as (url, _):
        yield url


@contextlib.contextmanager
def spawned_http(
    data: Path, *args: str, env: Mapping[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """:func:`spawn_http`, yielding the process too; SIGTERM stops it, and it must exit 0."""
    process = subprocess.Popen(
        [CENOTAPH, "mcp", "--data", str(data), "--transport", "streamable-http", "--port", "0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        yield _served_url(process), process
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read() == "", "nothing but the protocol may reach stdout"
        process.stdout.close()
        process.stderr.close()
    assert process.returncode == 0, f"cenotaph mcp exited with {process.returncode}"


def _served_url(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            raise AssertionError(f"cenotaph mcp exited with {process.returncode}")
        found = re.search(r"serving (http://\S+)", line)
        if found:
            return found.group(1)
    raise AssertionError("cenotaph mcp did not start within 60 s")


class RawStdio:
    """A real ``cenotaph mcp`` over stdio, written to line by line, its answers read one by one
    (each with a deadline: a line that gets no answer fails the test instead of hanging it)."""

    def __init__(self, data: Path, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [CENOTAPH, "mcp", "--data", str(data), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self._answers: queue.Queue[bytes] = queue.Queue()
        self._errors: queue.Queue[bytes] = queue.Queue()
        self.stderr: list[str] = []
        for stream, into in ((self.proc.stdout, self._answers), (self.proc.stderr, self._errors)):
            threading.Thread(target=_drain, args=(stream, into), daemon=True).start()

    def send(self, line: bytes | dict[str, Any]) -> None:
        data = line if isinstance(line, bytes) else json.dumps(line).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 60) -> dict[str, Any]:
        """The next line the server wrote, decoded."""
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout} s; stderr: {self.stderr_text()}") from None
        assert line, f"the server closed its output; stderr: {self.stderr_text()}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def request(
        self, request_id: int | str, method: str, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        self.send(
            {"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params else {})}
        )
        answer = self.answer()
        assert answer.get("id") == request_id, answer
        return answer

    def initialize(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        )["result"]
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return result

    def call(self, request_id: int | str, tool: str, **arguments: Any) -> dict[str, Any]:
        """A tools/call's result (a tool error is a result with isError)."""
        answer = self.request(request_id, "tools/call", {"name": tool, "arguments": arguments})
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    def wait_for_stderr(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.stderr):
            try:
                self.stderr.append(self._errors.get(timeout=max(0.0, deadline - time.monotonic())).decode())
            except queue.Empty:
                raise AssertionError(
                    f"{text!r} not on stderr within {timeout} s: {self.stderr_text()}"
                ) from None
        return next(line for line in self.stderr if text in line)

    def stderr_text(self) -> str:
        while not self._errors.empty():
            self.stderr.append(self._errors.get().decode())
        return "".join(self.stderr)[-3000:]

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    def finish(self, timeout: float = 60) -> tuple[int, list[dict[str, Any]]]:
        """Close stdin, wait for the exit; the exit status and every answer not read yet."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"cenotaph mcp did not exit within {timeout} s: {self.stderr_text()}"
            ) from None
        rest: list[dict[str, Any]] = []
        while (line := self._answers.get(timeout=10)) != b"":
            rest.append(json.loads(line))
        return code, rest

    def __enter__(self) -> RawStdio:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()


def _drain(stream: IO[bytes] | None, into: queue.Queue[bytes]) -> None:
    """Every line of ``stream`` into ``into``, then b"" at its end."""
    assert stream is not None
    with stream:
        for line in stream:
            into.put(line)
    into.put(b"")


def wait_for_file(path: Path, timeout: float = 60) -> None:
    """Until ``path`` exists (a CENOTAPH_PAUSE marker: the server has reached its pause point)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout} s"
        time.sleep(0.02)


def nested(levels: int) -> Any:
    """A JSON value of ``levels`` nested lists around a 1."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def files_of(data: Path) -> list[Path]:
    return [p for p in data.rglob("*") if p.is_file()]


def canary_forms(canary: str) -> list[bytes]:
    """The plain, hex and UTF-16 forms a scan looks for (S1)."""
    raw = canary.encode()
    return [
        raw,
        raw.hex().encode(),
        raw.hex().upper().encode(),
        canary.encode("utf-16-le"),
        canary.encode("utf-16-be"),
    ]


def find_canary(data: Path, canary: str) -> list[str]:
    forms = canary_forms(canary)
    return [str(p) for p in files_of(data) if any(form in p.read_bytes() for form in forms)]


def dump(structured: Any) -> str:
    return json.dumps(structured, sort_keys=True)
