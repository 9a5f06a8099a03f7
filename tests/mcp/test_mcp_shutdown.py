"""Stopping a real ``cenotaph mcp``: SIGTERM or Ctrl-C while a request is in flight (held at a
pause point inside the store) stops taking requests, answers that one, closes the store and
exits 0; the store it leaves needs no recovery at the next open. Over stdio and streamable HTTP.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from tests.mcp.mcp_kit import SESSION, USER, RawStdio, spawned_http, wait_for_file

import cenotaph


def assert_closed_cleanly(data: Path, request_id: str) -> None:
    """SQLite's write-ahead log and shared-memory files go when the last connection closes
    cleanly (a killed process leaves them, with what they hold for the next open to recover);
    the audit chain matches the anchors the store flushed on close; the forget that was answered
    is durable, and the worker of a reopened store finishes it."""
    left = sorted(p.name for p in data.iterdir() if p.name.endswith(("-wal", "-shm", "-journal")))
    assert left == [], f"the store was not closed cleanly: {left}"
    with cenotaph.open(data) as store:
        store.verify_audit()  # raises StorageError naming any edit
        assert store.read(SESSION, "diet") is None
        assert store.erasure(request_id).wait(60).state == "verified"


def seed(data: Path) -> None:
    with cenotaph.open(data, auto_purge="off") as store:
        store.write(SESSION, "diet", "vegetarian")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_over_stdio_answers_the_request_in_flight(
    cli_data: Path, tmp_path: Path, signum: int
) -> None:
    seed(cli_data)
    marker = tmp_path / "forgetting"
    env = {"CENOTAPH_PAUSE": f"forget.planned:{marker}"}
    with RawStdio(cli_data, "--scope", SESSION, "--prefix", USER, env=env) as server:
        server.initialize()
        params = {"name": "memory_forget", "arguments": {"key": "diet"}}
        server.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        wait_for_file(marker)  # the forget is inside the store, held
        server.signal(signum)
        assert "answering 1 request(s) in flight" in server.wait_for_stderr("stopping")
        server.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})  # after the stop: never read
        marker.unlink()
        answer = server.answer()
        code, rest = server.finish()
    assert answer["id"] == 1 and not answer["result"].get("isError"), answer
    assert code == 0 and rest == [], (code, rest, server.stderr_text())
    assert_closed_cleanly(cli_data, answer["result"]["structuredContent"]["request_id"])


def test_the_end_of_input_over_stdio_still_answers_the_request_in_flight(
    cli_data: Path, tmp_path: Path
) -> None:
    seed(cli_data)
    marker = tmp_path / "forgetting"
    with RawStdio(cli_data, "--scope", SESSION, env={"CENOTAPH_PAUSE": f"forget.planned:{marker}"}) as server:
        server.initialize()
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "memory_forget", "arguments": {"key": "diet"}},
            }
        )
        wait_for_file(marker)
        assert server.proc.stdin is not None
        server.proc.stdin.close()  # the client is done writing; it still reads
        marker.unlink()
        answer = server.answer()
        code, rest = server.finish()
    assert answer["id"] == 1 and not answer["result"].get("isError") and code == 0 and rest == []
    assert_closed_cleanly(cli_data, answer["result"]["structuredContent"]["request_id"])


def _listening(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_over_http_finishes_the_request_in_flight(
    cli_data: Path, tmp_path: Path, signum: int
) -> None:
    seed(cli_data)
    marker = tmp_path / "forgetting"
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    answered: list[httpx.Response] = []
    with spawned_http(cli_data, "--scope", SESSION, env={"CENOTAPH_PAUSE": f"forget.planned:{marker}"}) as (
        url,
        proc,
    ):
        with httpx.Client(headers=headers, timeout=60) as http:
            hello = {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            }
            opened = http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
            http.headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
            call = {"name": "memory_forget", "arguments": {"key": "diet"}}
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
            in_flight = threading.Thread(target=lambda: answered.append(http.post(url, json=body)))
            in_flight.start()
            wait_for_file(marker)
            proc.send_signal(signum)
            deadline = time.monotonic() + 30
            while _listening(url):  # it stops accepting first...
                assert time.monotonic() < deadline, "still accepting connections after the signal"
                time.sleep(0.05)
            marker.unlink()  # ...then lets the request in flight finish
            in_flight.join(60)
        proc.wait(60)
    assert answered and answered[0].status_code == 200
    result = _sse_result(answered[0].text)
    assert not result.get("isError"), result
    assert_closed_cleanly(cli_data, result["structuredContent"]["request_id"])


def _sse_result(text: str) -> dict[str, Any]:
    """The result of the JSON-RPC answer in an SSE response body."""
    for line in text.splitlines():
        if line.startswith("data:"):
            message = json.loads(line[len("data:") :])
            if message.get("id") == 1:
                result: dict[str, Any] = message["result"]
                return result
    raise AssertionError(f"no answer to request 1 in {text!r}")
