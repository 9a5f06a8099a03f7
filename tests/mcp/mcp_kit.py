"""Fixtures for the MCP server's tests: real stores, the SDK's own ``Client``, real processes.

``mcp_store`` is a store in a fresh data directory (a real SQLite file, default auto-purge);
``memory_client(store, scope, prefix)`` connects the SDK's ``Client`` in memory to a memory
server over it; ``cli_data`` is a data directory made by ``cenotaph init`` for subprocesses;
``spawn_http(...)`` starts a real ``cenotaph mcp --transport streamable-http`` on a free
loopback port and yields its URL. :class:`Tools` wraps a client: ``ok`` asserts a call
succeeded and returns its structured content, ``refused`` asserts a one-line tool error and
returns its text.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

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


def stdio_params(data: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=CENOTAPH, args=["mcp", "--data", str(data), *args], env=dict(os.environ)
    )


@contextlib.contextmanager
def spawn_http(data: Path, *args: str) -> Iterator[str]:
    """A real ``cenotaph mcp`` listening on a free loopback port; yields its URL, then stops it."""
    process = subprocess.Popen(
        [CENOTAPH, "mcp", "--data", str(data), "--transport", "streamable-http", "--port", "0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield _served_url(process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read() == "", "nothing but the protocol may reach stdout"
        process.stdout.close()
        process.stderr.close()


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
