"""One JSON-RPC message off the wire, or the error that answers it.

Both transports read every incoming message here, so every line or body gets an answer: the
SDK's stdio reader drops what its parser refuses (the client waits until its own timeout), and
its HTTP reader answers with pydantic's report, which quotes the request's values.

>>> decode(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}').method
'ping'
>>> refused = decode(b'{"jsonrpc": "2.0", "id": 7, "method": 5}').answer
>>> refused.id, refused.error.code, refused.error.message
(7, -32600, 'Invalid Request: method must be a string')
>>> decode(b"not json").answer.error.code
-32700

What is refused, and how:

- not UTF-8, not JSON, nested too deeply to read, a number too long to read: ``-32700``
  (Parse error), id ``null``;
- JSON that is not one JSON-RPC 2.0 message (an array, a request whose ``method`` is not a
  string, ...), nested more than :data:`MAX_MESSAGE_DEPTH` levels, or holding a lone surrogate
  escape such as ``"\\ud800"`` (not Unicode text): ``-32600`` (Invalid Request), with the
  request's id when it has one (a response's id is the server's own, so it is never echoed).

Nesting: the MCP SDK parses at most :data:`SDK_PARSER_DEPTH` levels in a message -- the
server's HTTP transport and, what binds, the SDK's client, which drops an answer it cannot parse
and waits until its timeout. So that limit is the wire's, for what comes in and what goes out:
a value travels over MCP nested at most :data:`MAX_VALUE_DEPTH` levels (a search hit's value
sits six levels deep in its answer), less than the store keeps
(:data:`~cenotaph.validation.MAX_JSON_DEPTH`); ``server`` makes a deeper value a tool error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

__all__ = [
    "MAX_MESSAGE_DEPTH",
    "MAX_VALUE_DEPTH",
    "SDK_PARSER_DEPTH",
    "Refusal",
    "decode",
    "deeper_than",
]

SDK_PARSER_DEPTH = 200  # jiter's recursion limit: the SDK's parsers (client, HTTP server) read no deeper
MAX_MESSAGE_DEPTH = SDK_PARSER_DEPTH
# an answer nests its structured content at level 3 (message, result, structuredContent), and a
# search hit's value 4 levels inside that ({"hits": [{"record": {"value": ...}}]})
MAX_VALUE_DEPTH = SDK_PARSER_DEPTH - 6

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")  # only an escape can carry one into JSON text
_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_A_MESSAGE = (
    'Invalid Request: not a JSON-RPC 2.0 message: send one object with "jsonrpc": "2.0", a string '
    '"method", an "id" (a string or an integer) unless it is a notification, and an object "params"'
)


@dataclass(frozen=True)
class Refusal:
    """What was received is no message the server can handle: ``answer`` is the reply."""

    answer: JSONRPCError

    def to_json(self) -> bytes:
        """The reply as the SDK writes a message: compact JSON."""
        return self.answer.model_dump_json(by_alias=True, exclude_unset=True).encode()


def decode(data: bytes) -> JSONRPCMessage | Refusal:
    """The message ``data`` holds, or the error to answer it with (see the module docstring)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _refusal(PARSE_ERROR, "Parse error: the message is not UTF-8 text")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return _refusal(PARSE_ERROR, f"Parse error: not JSON ({exc.msg} at character {exc.pos})")
    except RecursionError:
        return _refusal(PARSE_ERROR, "Parse error: the message is nested too deeply to read")
    except ValueError:  # an integer literal longer than Python reads (4,300 digits)
        return _refusal(PARSE_ERROR, "Parse error: a number has too many digits; send it as a string")
    request_id = _request_id(raw)
    if isinstance(raw, list):
        return _refusal(
            INVALID_REQUEST, "Invalid Request: a batch (JSON array) is not accepted; send one message"
        )
    if deeper_than(raw, MAX_MESSAGE_DEPTH):
        return _refusal(
            INVALID_REQUEST,
            f"Invalid Request: the message is nested more than {MAX_MESSAGE_DEPTH} levels deep, deeper than MCP "
            f"carries; a value may be nested at most {MAX_VALUE_DEPTH} levels",
            request_id,
        )
    if _SURROGATE_ESCAPE.search(data) and _holds_lone_surrogate(raw):
        return _refusal(
            INVALID_REQUEST,
            "Invalid Request: a string holds a lone surrogate escape (\\ud800 to \\udfff outside a pair), "
            "which is not Unicode text; send the character itself or a valid pair",
            request_id,
        )
    if isinstance(raw, dict) and "method" in raw and "id" in raw and request_id is None:
        # a request whose id is null, a number with a fraction or a boolean would pass as a
        # notification (which gets no answer); MCP ids are strings or integers, never null
        return _refusal(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    try:
        return jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except ValidationError:
        return _refusal(INVALID_REQUEST, _why_not_a_message(raw), request_id)


def deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` nests containers (dicts, lists, tuples) more than ``limit`` levels deep."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))
    return False


def _refusal(code: int, message: str, request_id: int | str | None = None) -> Refusal:
    return Refusal(JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message)))


def _request_id(raw: object) -> int | str | None:
    """The id of what looks like a request (it names a method); None for anything else, a
    response included (its id numbers one of the server's own requests)."""
    if not isinstance(raw, dict) or "method" not in raw:
        return None
    found = raw.get("id")
    if isinstance(found, str) and not _has_surrogate(found):
        return found
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _why_not_a_message(raw: object) -> str:
    """Which rule ``raw`` breaks, named without any of its values."""
    if not isinstance(raw, dict):
        return _NOT_A_MESSAGE
    if raw.get("jsonrpc") != "2.0":
        return 'Invalid Request: "jsonrpc" must be "2.0"'
    if "method" in raw:
        if not isinstance(raw["method"], str):
            return "Invalid Request: method must be a string"
        if "params" in raw and not isinstance(raw["params"], dict | type(None)):
            return "Invalid Request: params must be an object"
    elif "result" in raw or "error" in raw:
        return (
            'Invalid Request: a response needs an "id" (a string or an integer) and an object '
            '"result", or an "error" object with an integer "code" and a string "message"'
        )
    return _NOT_A_MESSAGE


def _holds_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _has_surrogate(text: str) -> bool:
    """json.loads joins every valid pair into one character, so any surrogate left is lone."""
    return not text.isascii() and _SURROGATE.search(text) is not None
