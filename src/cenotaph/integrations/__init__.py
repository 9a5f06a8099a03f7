"""Drop-in memory backends for agent frameworks, over the public :mod:`cenotaph` API.

- :mod:`cenotaph.integrations.langgraph`: ``CenotaphStore``, a LangGraph ``BaseStore``.
- :mod:`cenotaph.integrations.anthropic`: ``CenotaphMemoryTool``, the Anthropic SDK's memory tool.

Each needs its framework installed: ``pip install 'cenotaph[integrations]'``. Nothing is imported
here, so ``import cenotaph`` never pulls a framework in.
"""
