"""The operator console at ``/console`` (being built)."""

from __future__ import annotations

from fastapi import FastAPI

__all__ = ["install_console"]


def install_console(app: FastAPI, *, secure_cookies: bool = True) -> None:
    """Mount the console's routes on ``app``."""
