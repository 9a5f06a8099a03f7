"""The MCP server: ``cenotaph mcp`` (profiles ``memory`` and ``knowledge-graph``).

Built on the official ``mcp`` SDK (``pip install 'cenotaph[mcp]'``). Modules, one job each:

- ``confinement``  which scopes a server's tools may reach (``--scope``, ``--prefix``)
- ``connections``  one MCP connection = one store session, plus the forgets it issued
- ``refusals``     what a failed call says: one line, never a traceback or a value
- ``server``       the ``MCPServer`` both profiles build on, and tool registration
- ``memory``       the ``memory`` profile's seven tools
- ``graph``        a knowledge graph (entities, observations, relations) kept as records
- ``kg_schemas``   the reference knowledge-graph server's tool schemas, as published
- ``knowledge_graph``  the ``knowledge-graph`` profile's nine tools over ``graph``
- ``jsonl``        the reference server's JSONL file format, for ``cenotaph kg import/export``
- ``wire``         one message off the wire, or the JSON-RPC error that answers it
- ``stdio``        serving over stdio: every line answered, stopping with the answers in flight
- ``transport``    serving over streamable HTTP (loopback unless API keys bound it), and stdio
"""
