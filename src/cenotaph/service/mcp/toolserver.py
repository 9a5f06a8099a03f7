"""The MCP server class both profiles build on, and how their tools are registered.

:class:`CenotaphMCPServer` is the SDK's ``MCPServer`` with one change at its public
``call_tool``: every failure reaches the client as a one-line tool error (``is_error``) -- a
refusal with its reason, invalid arguments naming each field (never the rejected value), or, for
a bug, the exception's type only. Nothing a tool raises becomes a protocol error or a traceback,
and the server logs at WARNING, so the SDK's INFO line per failed call (which repeats the
message) is never written. Values nested deeper than MCP carries (:data:`.wire.MAX_VALUE_DEPTH`)
are tool errors too: in the arguments before the tool runs (so nothing is written that could not
be read back), in a result before a client would fail to parse it. ``serverInfo`` names
cenotaph and its version.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.server.models import InitializationOptions
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from cenotaph import __version__

from ..apikeys import ApiKey
from .connections import AgentConnection, ConnectionRegistry
from .refusals import invalid_arguments, reason_for
from .wire import MAX_VALUE_DEPTH, SDK_PARSER_DEPTH, deeper_than

__all__ = [
    "API_KEY_SCOPE",
    "DEBUG_ENV",
    "CenotaphMCPServer",
    "Registry",
    "build_tool",
    "connection_for",
    "text_result",
]

API_KEY_SCOPE = "cenotaph.api_key"  # the ASGI scope entry where the HTTP gate puts the caller's key
DEBUG_ENV = "CENOTAPH_DEBUG"  # set to 1 to let a tool's unexpected exception reach the SDK's log
Registry = Callable[[], ConnectionRegistry]
_log = logging.getLogger("cenotaph.mcp")

# how deep a tool's arguments may nest (a value sits one level down: {"value": v}) and its
# structured result (level 3 of the answer message, which the SDK's client must still parse)
MAX_ARGUMENTS_DEPTH = MAX_VALUE_DEPTH + 1
MAX_RESULT_DEPTH = SDK_PARSER_DEPTH - 2
ARGUMENTS_TOO_DEEP = (
    f"invalid arguments: a value is nested more than {MAX_VALUE_DEPTH} levels deep, deeper than MCP "
    "carries (its SDK parses 200 levels a message); nothing was changed. Use a flatter structure"
)
ANSWER_TOO_DEEP = (
    f"refused: the answer holds a memory nested more than {MAX_VALUE_DEPTH} levels deep, deeper than "
    "MCP carries; read it through the HTTP API or the Python API"
)


class CenotaphMCPServer(MCPServer[ConnectionRegistry]):
    """An ``MCPServer`` whose lifespan holds the connections and whose failures are one line."""

    def __init__(self, name: str, *, instructions: str, tools: list[Tool], registry: Registry) -> None:
        @asynccontextmanager
        async def lifespan(_: MCPServer[ConnectionRegistry]) -> AsyncIterator[ConnectionRegistry]:
            # entered once per stream (stdio, in-memory) and once per HTTP server
            connections = registry()
            try:
                yield connections
            finally:
                connections.close()

        super().__init__(
            name,
            version=__version__,
            instructions=instructions,
            tools=tools,
            lifespan=lifespan,
            log_level="WARNING",
        )

    async def serve_streams(
        self, read_stream: Any, write_stream: Any, options: InitializationOptions | None = None
    ) -> None:
        """Serve one connection over a transport's two streams until ``read_stream`` ends (what
        the SDK's ``run_stdio_async`` does over its own stdio streams)."""
        lowlevel = self._lowlevel_server  # the SDK names no public way to reach it
        init = options if options is not None else lowlevel.create_initialization_options()
        await lowlevel.run(read_stream, write_stream, init)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[ConnectionRegistry, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if deeper_than(arguments, MAX_ARGUMENTS_DEPTH):
            raise ToolError(ARGUMENTS_TOO_DEEP)
        try:
            result = await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            reason = reason_for(cause)
            if reason is not None:
                raise ToolError(reason) from None
            if os.environ.get(DEBUG_ENV):
                raise
            _log.error("tool %s failed unexpectedly (%s)", name, type(cause).__name__)
            raise ToolError(
                f"internal error in {name} ({type(cause).__name__}); nothing was changed that a retry "
                f"would not see; please report it (set {DEBUG_ENV}=1 on the server to log where)"
            ) from None
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(invalid_arguments(name, exc.__cause__)) from None
            raise
        structured = getattr(result, "structured_content", None)
        if structured is not None and deeper_than(structured, MAX_RESULT_DEPTH):
            raise ToolError(ANSWER_TOO_DEEP)
        return result


class _VerbatimStrings(FuncMetadata):
    """Arguments whose string values are kept as sent. The SDK parses a string argument as JSON
    when its type is not ``str`` (a workaround for clients that send lists as JSON text); for a
    memory's value that would turn the string ``"null"`` into null."""

    verbatim: frozenset[str] = frozenset()

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        return {k: data[k] if k in self.verbatim else v for k, v in parsed.items()}


def build_tool(
    fn: Callable[..., Any],
    *,
    name: str,
    title: str,
    description: str,
    annotations: ToolAnnotations,
    verbatim: Iterable[str] = (),
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
) -> Tool:
    """A tool with a typed output schema; ``input_schema``/``output_schema`` replace the
    published schemas (validation still follows ``fn``'s annotations)."""
    tool = Tool.from_function(
        fn, name=name, title=title, description=description, annotations=annotations, structured_output=True
    )
    meta = tool.fn_metadata
    if verbatim:
        meta = _VerbatimStrings(
            arg_model=meta.arg_model,
            output_schema=meta.output_schema,
            output_model=meta.output_model,
            wrap_output=meta.wrap_output,
            verbatim=frozenset(verbatim),
        )
        tool.fn_metadata = meta
    if input_schema is not None:
        tool.parameters = input_schema
    if output_schema is not None:
        meta.output_schema = output_schema
    return tool


def connection_for(ctx: Context[Any, Any]) -> AgentConnection:
    """The connection this request belongs to (see ``connections.identity_of``), bounded by the
    API key the HTTP gate authenticated for this very request, if any."""
    scope = getattr(ctx.request_context.request, "scope", None)
    key = scope.get(API_KEY_SCOPE) if isinstance(scope, dict) else None
    registry = ctx.request_context.lifespan_context
    if not isinstance(registry, ConnectionRegistry):
        raise TypeError("the server's lifespan must hold its ConnectionRegistry")
    return registry.connection(ctx.headers, key if isinstance(key, ApiKey) else None)


def text_result(text: str, structured: Mapping[str, Any]) -> CallToolResult:
    """A result readable as text (``text``) and as data (``structured``, per the output schema)."""
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(structured))
