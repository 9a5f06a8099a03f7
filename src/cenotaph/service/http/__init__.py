"""cenotaph over HTTP: the ``/v1`` API, the operator console, and the app that serves both.

Needs the ``server`` extra (``pip install 'cenotaph[server]'``).
"""

from __future__ import annotations

from .app import MAX_BODY_BYTES, create_app

__all__ = ["MAX_BODY_BYTES", "create_app"]
