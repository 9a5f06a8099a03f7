"""LangGraph integration: :class:`CenotaphStore`, a ``BaseStore`` whose deletes are erasures.

Needs ``pip install 'cenotaph[integrations]'`` (``langgraph`` 1.x). See ``docs/integrations.md``
for how namespaces map to scopes and where the adapter differs from LangGraph's own stores.
"""

from __future__ import annotations

from ._namespaces import NamespaceMap, UserPattern
from ._store import DEFAULT_SCOPE, CenotaphStore, ForgottenItemError, StaleItemError

__all__ = [
    "DEFAULT_SCOPE",
    "CenotaphStore",
    "ForgottenItemError",
    "NamespaceMap",
    "StaleItemError",
    "UserPattern",
]
