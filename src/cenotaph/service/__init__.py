"""Network services over the store: the HTTP API and the MCP server."""
