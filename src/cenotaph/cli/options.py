"""Options shared by commands: where the data lives, and opening the store it holds."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

import cenotaph
from cenotaph.backends.sqlite.backend import DB_NAME
from cenotaph.crypto.provider import KEYRING_ENV, MASTER_KEY_ENV
from cenotaph.crypto.provider import keyring_location as default_keyring_location

__all__ = [
    "DATA_ENV",
    "DEFAULT_DATA",
    "data_option",
    "json_callback",
    "keyring_inside",
    "keyring_location",
    "open_existing_store",
    "parse_json",
    "root_of_trust_warning",
]

F = TypeVar("F", bound=Callable[..., Any])

DATA_ENV = "CENOTAPH_DATA"
DEFAULT_DATA = "cenotaph-data"


def data_option(func: F) -> F:
    """The shared ``--data DIR`` option, passed to the command as ``data`` (a Path)."""
    return click.option(
        "--data",
        "data",
        type=click.Path(file_okay=False, path_type=Path),
        metavar="DIR",
        envvar=DATA_ENV,
        default=DEFAULT_DATA,
        show_default=True,
        show_envvar=True,
        help="The data directory of the store.",
    )(func)


def keyring_location(data: Path) -> Path:
    """Where the default key provider keeps the keyring for ``data`` (``$CENOTAPH_KEYRING`` wins)."""
    return default_keyring_location(data)


def keyring_inside(data: Path) -> bool:
    """True if the keyring lives inside the data directory (S8: copying the directory copies the keys)."""
    keyring = keyring_location(data).resolve()
    return keyring.is_relative_to(data.resolve())


def root_of_trust_warning(data: Path) -> str | None:
    """The S8 warning for this setup, or None when the keys do not travel with the data directory."""
    if not keyring_inside(data):
        return None
    if os.environ.get(MASTER_KEY_ENV):
        return (
            f"the keyring is inside the data directory but sealed with {MASTER_KEY_ENV}; keep that key "
            "outside this directory and its backups"
        )
    return (
        "the keyring is inside the data directory: whoever copies the directory has the keys, so "
        "encryption protects a copied database file, not a copied directory. Keep it elsewhere with "
        f"{KEYRING_ENV}=/path/outside (before init), or seal it with {MASTER_KEY_ENV}=<64 hex characters>"
    )


@contextmanager
def open_existing_store(data: Path, *, auto_purge: str = "off") -> Iterator[cenotaph.Store]:
    """Open the store in ``data``; a missing store or keyring is bad input, never created silently.

    Creating one here would turn a mistyped ``--data`` or ``$CENOTAPH_KEYRING`` into an empty store
    (or a fresh keyring that cannot decrypt anything); ``cenotaph init`` is the one place that creates.

    ``auto_purge`` is ``"off"``: a command ends long before a background purge would, and one
    that inspects (``status``, ``doctor``, ``audit verify``) must not change what it reports on.
    """
    if not (data / DB_NAME).is_file():
        raise click.BadParameter(
            f"no cenotaph store in {str(data)!r}; create one with `cenotaph init --data {data}`",
            param_hint="--data",
        )
    keyring = keyring_location(data)
    if not keyring.is_dir():
        raise click.BadParameter(
            f"no keyring at {str(keyring)!r}; point {KEYRING_ENV} at this store's keyring",
            param_hint="--data",
        )
    # An absolute path: the residue scanner walks this directory, and with a relative root it
    # matched no file at all (a clean scan of nothing proves nothing).
    store = cenotaph.open(data.resolve(), auto_purge=auto_purge)
    try:
        yield store
    finally:
        store.close()


def json_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """Click callback for an option holding JSON text (e.g. ``--metadata``); None stays None."""
    hint = max(param.opts, key=len) if param.opts else f"--{param.name}"  # "--filter", not "--filter_"
    return None if value is None else parse_json(value, hint)


def parse_json(text: str, param_hint: str) -> Any:
    """Parse JSON text from the command line; the error names the position, never the text."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        raise click.BadParameter(f"not valid JSON ({_json_reason(exc)})", param_hint=param_hint) from exc


class _DuplicateKeyError(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object naming a key twice is refused: json.loads would silently keep the last one."""
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKeyError
    return result


def _json_reason(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, _DuplicateKeyError):
        return "an object names the same key twice; keep one"
    return "unparseable"
