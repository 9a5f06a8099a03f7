"""cenotaph over HTTP: the ``/v1`` API, the operator console, and the app that serves both.

Needs the ``server`` extra (``pip install 'cenotaph[server]'``). ``create_app`` is imported on
first use, so the remote client can share this package's error table without FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import MAX_BODY_BYTES, create_app

__all__ = ["MAX_BODY_BYTES", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
