"""What reaches a real ``cenotaph mcp`` that is no message it can handle: every line over stdio
and every body over HTTP gets a JSON-RPC error at once (-32700 parse error, -32600 invalid
request, with the request's id when it has one), never silence, and the connection goes on.

Values travel nested at most ``MAX_VALUE_DEPTH`` levels (what the SDK's client can parse back);
deeper is a one-line tool error that names the limit and writes nothing, and a message nested
past what the SDK parses is a -32600 with its id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import JSONRPCNotification, JSONRPCResponse
from tests.mcp.mcp_kit import SESSION, USER, RawStdio, Tools, nested, spawn_http

import cenotaph
from cenotaph.service.mcp.stdio import _encode
from cenotaph.service.mcp.wire import MAX_MESSAGE_DEPTH, MAX_VALUE_DEPTH
from cenotaph.validation import MAX_JSON_DEPTH

PARSE_ERROR, INVALID_REQUEST = -32700, -32600


def _call(request_id: object, tool: str, **arguments: Any) -> bytes:
    params = {"name": tool, "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


def _deep_message(request_id: int, levels: int) -> bytes:
    """A memory_write whose message nests ``levels`` deep (its value ``levels - 3``)."""
    return _call(request_id, "memory_write", key="deep", value=nested(levels - 3))


# (what is sent, the error code, the id the answer carries)
REFUSED: dict[str, tuple[bytes, int, object]] = {
    "junk": (b"this is not json", PARSE_ERROR, None),
    "truncated": (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', PARSE_ERROR, None),
    "not utf-8": (b'{"jsonrpc": "2.0", "id": 2, "method": "ping", "x": "\xff\xfe"}', PARSE_ERROR, None),
    "too deep to read": (b"[" * 5000 + b"]" * 5000, PARSE_ERROR, None),
    "a 5000-digit number": (
        b'{"jsonrpc": "2.0", "id": 3, "method": "ping", "x": ' + b"9" * 5000 + b"}",
        PARSE_ERROR,
        None,
    ),
    "lone surrogate in a value": (
        b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"memory_write",'
        b'"arguments":{"key":"k","value":"caf\\ud800"}}}',
        INVALID_REQUEST,
        4,
    ),
    "lone surrogate in a name": (
        b'{"jsonrpc":"2.0","id":"s5","method":"ping","params":{"\\uDFFF":1}}',
        INVALID_REQUEST,
        "s5",
    ),
    "nested 201 levels": (_deep_message(6, MAX_MESSAGE_DEPTH + 1), INVALID_REQUEST, 6),
    "nested 256 levels": (_deep_message(7, 256), INVALID_REQUEST, 7),
    "a batch": (b'[{"jsonrpc": "2.0", "id": 8, "method": "ping"}]', INVALID_REQUEST, None),
    "not JSON-RPC": (b'{"hello": "world"}', INVALID_REQUEST, None),
    "a string": (b'"ping"', INVALID_REQUEST, None),
    "no jsonrpc member": (b'{"id": 9, "method": "ping"}', INVALID_REQUEST, 9),
    "method not a string": (b'{"jsonrpc": "2.0", "id": 10, "method": 10}', INVALID_REQUEST, 10),
    "params not an object": (
        b'{"jsonrpc": "2.0", "id": 11, "method": "ping", "params": [1]}',
        INVALID_REQUEST,
        11,
    ),
    "a boolean id": (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', INVALID_REQUEST, None),
    "a null id": (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', INVALID_REQUEST, None),
    "a fractional id": (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', INVALID_REQUEST, None),
    "a bad response": (b'{"jsonrpc": "2.0", "id": 12, "result": "not an object"}', INVALID_REQUEST, None),
}


def _check_refusal(name: str, answer: dict[str, Any], code: int, request_id: object) -> None:
    assert answer.get("jsonrpc") == "2.0" and "result" not in answer, (name, answer)
    assert answer["error"]["code"] == code and answer["id"] == request_id, (name, answer)
    message = answer["error"]["message"]
    assert message and "\n" not in message and "input_value" not in message, (name, message)
    assert "caf" not in message and "world" not in message, (name, "a refusal never quotes the request")


def test_every_refused_line_is_answered_and_the_connection_goes_on(cli_data: Path) -> None:
    with RawStdio(cli_data, "--scope", SESSION, "--prefix", USER) as server:
        server.initialize()
        for number, (name, (line, code, request_id)) in enumerate(REFUSED.items()):
            server.send(b"   ")  # a blank line is no message: skipped, not answered
            server.send(line)
            _check_refusal(name, server.answer(), code, request_id)
            assert server.request(1000 + number, "ping") == {
                "jsonrpc": "2.0",
                "id": 1000 + number,
                "result": {},
            }
        server.send(b'{"jsonrpc": "2.0", "id": 99, "method": "ping", "x": "' + b"a" * (4 << 20) + b'"}')
        too_long = server.answer()
        assert too_long["error"]["code"] == INVALID_REQUEST and "longer than" in too_long["error"]["message"]
        assert server.request(100, "ping")["result"] == {}
        code, rest = server.finish()
    assert code == 0 and rest == []


def test_values_travel_as_deep_as_mcp_carries_and_deeper_is_a_tool_error(cli_data: Path) -> None:
    deepest = nested(MAX_VALUE_DEPTH)
    elsewhere = f"{USER}/session:python"
    with cenotaph.open(cli_data) as store:  # the store keeps deeper values than MCP can answer
        store.write(elsewhere, "from-python", nested(MAX_JSON_DEPTH))
    with RawStdio(cli_data, "--scope", SESSION, "--prefix", USER) as server:
        server.initialize()
        mid = nested(210)  # deeper than MCP carries, shallower than the store keeps
        server.send(_call(1, "memory_write", key="mid", value=mid))
        _check_refusal("mid", server.answer(), INVALID_REQUEST, 1)
        written = server.call(2, "memory_write", key="deepest", value=deepest)
        assert not written.get("isError") and written["structuredContent"]["record"]["value"] == deepest
        read = server.call(3, "memory_read", key="deepest")
        assert read["structuredContent"]["record"]["value"] == deepest
        hits = server.call(4, "memory_search", query="deepest")["structuredContent"]["hits"]
        assert any(h["record"]["key"] == "deepest" for h in hits)
        too_deep = server.call(5, "memory_write", key="too-deep", value=nested(MAX_VALUE_DEPTH + 1))
        assert too_deep["isError"] and f"{MAX_VALUE_DEPTH} levels" in too_deep["content"][0]["text"]
        assert server.call(6, "memory_read", key="too-deep")["structuredContent"]["found"] is False
        stored_deeper = server.call(7, "memory_read", key="from-python", scope=elsewhere)
        assert stored_deeper["isError"] and "HTTP API" in stored_deeper["content"][0]["text"]
        listed = server.call(8, "memory_list", scope=elsewhere)
        assert listed["isError"] and f"{MAX_VALUE_DEPTH} levels" in listed["content"][0]["text"]
        assert server.request(9, "ping")["result"] == {}
        code, rest = server.finish()
    assert code == 0 and rest == []


def test_initialize_names_cenotaph_and_its_version(cli_data: Path) -> None:
    with RawStdio(cli_data, "--scope", SESSION) as server:
        info = server.initialize()["serverInfo"]
        server.finish()
    assert info["name"] == "cenotaph-memory" and info["version"] == cenotaph.__version__


@pytest.mark.parametrize("protocol", ["2025-06-18", "2026-07-28"])
def test_every_refused_body_is_answered_over_http(cli_data: Path, protocol: str) -> None:
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with spawn_http(cli_data, "--scope", SESSION) as url, httpx.Client(headers=accept, timeout=30) as http:
        headers = {"MCP-Protocol-Version": protocol}
        if protocol == "2025-06-18":  # a legacy session: initialize first
            hello = {
                "protocolVersion": protocol,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            }
            opened = http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
            headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
        for name, (body, code, request_id) in REFUSED.items():
            answer = http.post(url, content=body, headers=headers)
            assert answer.status_code == 400 and answer.headers["content-type"] == "application/json", name
            _check_refusal(name, answer.json(), code, request_id)
        huge = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": "' + b"a" * (5 << 20) + b'"}'
        assert http.post(url, content=huge, headers=headers).status_code == 413  # the SDK's answer
        chunks = (huge[i : i + (1 << 20)] for i in range(0, len(huge), 1 << 20))  # no Content-Length
        assert http.post(url, content=chunks, headers=headers).status_code == 413


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_over_http_gets_the_depth_limits(cli_data: Path, mode: str) -> None:
    with spawn_http(cli_data, "--scope", SESSION) as url:
        async with Client(url, mode=mode) as client:
            tools = Tools(client)
            written = await tools.ok("memory_write", key="deepest", value=nested(MAX_VALUE_DEPTH))
            assert written["record"]["value"] == nested(MAX_VALUE_DEPTH)
            assert f"{MAX_VALUE_DEPTH} levels" in await tools.refused(
                "memory_write", key="k", value=nested(MAX_VALUE_DEPTH + 1)
            )
            with pytest.raises(MCPError) as refused:
                await client.call_tool("memory_write", {"key": "k", "value": nested(MAX_MESSAGE_DEPTH)})
            assert refused.value.error.code == INVALID_REQUEST
            assert (await tools.ok("memory_read", key="k"))["found"] is False


def test_an_answer_that_cannot_be_written_becomes_an_error_with_its_id() -> None:
    """The stdio writer's last line of defence: one unserializable answer (the SDK's serializer
    stops at 255 levels) is an internal error for that request, not the end of the connection."""
    written = _encode(JSONRPCResponse(jsonrpc="2.0", id=7, result={"x": nested(300)}))
    assert written is not None
    answer = json.loads(written)
    assert answer["id"] == 7 and answer["error"]["code"] == -32603
    assert _encode(JSONRPCNotification(jsonrpc="2.0", method="x", params={"x": nested(300)})) is None
