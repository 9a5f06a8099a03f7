"""Options shared by commands: where the data lives, and opening the store it holds."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

import cenotaph
from cenotaph.backends import looks_like_store
from cenotaph.crypto.provider import KEYRING_ENV, MASTER_KEY_ENV
from cenotaph.crypto.provider import keyring_location as default_keyring_location

from .output import GLOBAL_TABLE, table_group_option

__all__ = [
    "DATA_ENV",
    "DEFAULT_DATA",
    "GLOBAL_DATA",
    "check_global_options",
    "data_option",
    "global_options",
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


# Where the group keeps ``cenotaph --data DIR --table COMMAND``'s values (ctx.meta is shared by
# every context of one invocation), for the command's own options to pick up.
GLOBAL_DATA = "cenotaph.data"
_DATA_TYPE = click.Path(file_okay=False, path_type=Path)


def data_option(func: F) -> F:
    """The shared ``--data DIR`` option, passed to the command as ``data`` (a Path).

    It may also come before the command (``cenotaph --data DIR COMMAND``); the command line wins
    over ``$CENOTAPH_DATA``, and the same option given in both places must agree.
    """
    return click.option(
        "--data",
        "data",
        type=_DATA_TYPE,
        metavar="DIR",
        envvar=DATA_ENV,
        default=DEFAULT_DATA,
        show_default=True,
        show_envvar=True,
        callback=_command_data,
        help="The data directory of the store (also accepted before the command).",
    )(func)


def _command_data(ctx: click.Context, param: click.Parameter, value: Path) -> Path:
    before: Path | None = ctx.meta.get(GLOBAL_DATA)
    if before is None:
        return value
    given_here = param.name and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE
    if given_here and value != before:
        raise click.UsageError(
            "--data was given before and after the command with different directories; give it once",
            ctx=ctx,
        )
    return before


def _group_data(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    if value is not None:
        ctx.meta[GLOBAL_DATA] = value
    return value


def global_options(func: F) -> F:
    """``--data DIR`` and ``--table`` on the ``cenotaph`` group itself, for commands that take them."""
    func = click.option(
        "--data",
        "data",
        type=_DATA_TYPE,
        metavar="DIR",
        callback=_group_data,
        expose_value=False,
        is_eager=True,
        help=f"The data directory, for every command that uses one (default ${DATA_ENV}, else ./{DEFAULT_DATA}).",
    )(func)
    return table_group_option(func)


def check_global_options(ctx: click.Context) -> None:
    """Refuse ``cenotaph --data DIR COMMAND`` (or ``--table``) for a command without that option:
    silently ignoring it would let ``cenotaph --data prod demo`` look like it touched ``prod``."""
    name = ctx.invoked_subcommand
    command = ctx.command.get_command(ctx, name) if isinstance(ctx.command, click.Group) and name else None
    if command is None:
        return
    for option, given in (("data", GLOBAL_DATA in ctx.meta), ("table", bool(ctx.meta.get(GLOBAL_TABLE)))):
        if given and option not in _option_names(command):
            raise click.UsageError(f"`cenotaph {name}` has no --{option} option; leave it out", ctx=ctx)


def _option_names(command: click.Command) -> set[str]:
    names = {p.name for p in command.params if isinstance(p, click.Option) and p.name}
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= _option_names(sub)
    return names


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
        "encryption protects a copied database file, not a copied directory. Keep it elsewhere "
        f"(`cenotaph keyring move /path/outside`, then {KEYRING_ENV}=/path/outside; or set it before "
        f"init), and seal it (`cenotaph keyring seal` with {MASTER_KEY_ENV}=<64 hex characters>)"
    )


@contextmanager
def open_existing_store(data: Path, *, auto_purge: str = "off") -> Iterator[cenotaph.Store]:
    """Open the store in ``data``; a missing store or keyring is bad input, never created silently.

    Creating one here would turn a mistyped ``--data`` or ``$CENOTAPH_KEYRING`` into an empty store
    (or a fresh keyring that cannot decrypt anything); ``cenotaph init`` is the one place that creates.

    ``auto_purge`` is ``"off"``: a command ends long before a background purge would, and one
    that inspects (``status``, ``doctor``, ``audit verify``) must not change what it reports on.
    """
    if not looks_like_store(data):
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
