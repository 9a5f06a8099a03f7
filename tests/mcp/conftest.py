"""Fixtures of the MCP tests; the helpers they use live in ``mcp_kit`` (this directory has no
``__init__``: a package named ``tests/mcp`` would shadow the ``mcp`` SDK)."""

from tests.mcp.mcp_kit import cli_data, mcp_store

__all__ = ["cli_data", "mcp_store"]
