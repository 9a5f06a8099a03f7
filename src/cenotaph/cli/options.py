"""Options shared by commands: where the data lives (``--data``, see ``location``), and opening
the store it holds."""

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
from cenotaph import LocalKeyring
from cenotaph.operations import KEYRING_ENV, MASTER_KEY_ENV, POSTGRES_DEFAULT_SCHEMA, holds_store
from cenotaph.service.apikeys import ApiKeyRing

from .location import DataLocation, DataType
from .output import GLOBAL_TABLE, table_group_option

__all__ = [
    "DATA_ENV",
    "DEFAULT_DATA",
    "GLOBAL_DATA",
    "DataLocation",
    "api_key_ring",
    "check_global_options",
    "data_option",
    "global_options",
    "json_callback",
    "keyring_inside",
    "keyring_location",
    "open_existing_store",
    "parse_json",
    "require_keyring",
    "root_of_trust_warning",
]

F = TypeVar("F", bound=Callable[..., Any])

DATA_ENV = "CENOTAPH_DATA"
DEFAULT_DATA = "cenotaph-data"


# Where the group keeps ``cenotaph --data DIR --table COMMAND``'s values (ctx.meta is shared by
# every context of one invocation), for the command's own options to pick up.
GLOBAL_DATA = "cenotaph.data"
_DATA_TYPE = DataType()


def data_option(func: F) -> F:
    """The shared ``--data DIR|URL`` option, passed to the command as ``data`` (a DataLocation).

    It may also come before the command (``cenotaph --data DIR COMMAND``); the command line wins
    over ``$CENOTAPH_DATA``, and the same option given in both places must agree.
    """
    return click.option(
        "--data",
        "data",
        type=_DATA_TYPE,
        metavar="DIR|URL",
        envvar=DATA_ENV,
        default=DEFAULT_DATA,
        show_default=True,
        show_envvar=True,
        callback=_command_data,
        help="The store: its data directory, or postgresql://user@host/db?schema=NAME (keyring in "
        f"${KEYRING_ENV}); also accepted before the command.",
    )(func)


def _command_data(ctx: click.Context, param: click.Parameter, value: DataLocation) -> DataLocation:
    before: DataLocation | None = ctx.meta.get(GLOBAL_DATA)
    if before is None:
        return value
    given_here = param.name and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE
    if given_here and value != before:
        raise click.UsageError(
            "--data was given before and after the command with different stores; give it once",
            ctx=ctx,
        )
    return before


def _group_data(
    ctx: click.Context, param: click.Parameter, value: DataLocation | None
) -> DataLocation | None:
    if value is not None:
        ctx.meta[GLOBAL_DATA] = value
    return value


def global_options(func: F) -> F:
    """``--data DIR`` and ``--table`` on the ``cenotaph`` group itself, for commands that take them."""
    func = click.option(
        "--data",
        "data",
        type=_DATA_TYPE,
        metavar="DIR|URL",
        callback=_group_data,
        expose_value=False,
        is_eager=True,
        help="The store (a data directory or a postgresql:// URL), for every command that uses one "
        f"(default ${DATA_ENV}, else ./{DEFAULT_DATA}).",
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


def keyring_location(data: DataLocation) -> Path:
    """Where the store's keyring is (``$CENOTAPH_KEYRING`` wins; a PostgreSQL store needs it)."""
    return data.keyring()


def keyring_inside(data: DataLocation) -> bool:
    """True if the keyring lives inside the data directory (S8: copying the directory copies the keys)."""
    return data.keyring_inside()


def root_of_trust_warning(data: DataLocation) -> str | None:
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
def open_existing_store(data: DataLocation, *, auto_purge: str = "off") -> Iterator[cenotaph.Store]:
    """Open the store ``data`` names; a missing store or keyring is bad input, never created silently.

    Creating one here would turn a mistyped ``--data`` or ``$CENOTAPH_KEYRING`` into an empty store
    (or a fresh keyring that cannot decrypt anything); ``cenotaph init`` is the one place that creates.
    A PostgreSQL store is opened with the replicas ``$CENOTAPH_REPLICAS`` lists, and those
    ``$CENOTAPH_READ_REPLICAS`` lists as read replicas.

    ``auto_purge`` is ``"off"``: a command ends long before a background purge would, and one
    that inspects (``status``, ``doctor``, ``audit verify``) must not change what it reports on.
    """
    replicas, read_replicas = data.replicas(), data.read_replicas()
    if data.url is not None:
        if not holds_store(data.url):  # its server is asked (create=False, said in CLI)
            raise click.BadParameter(_no_store(data), param_hint="--data")
        require_keyring(data)
        store = cenotaph.open(
            data.url, auto_purge=auto_purge, replicas=replicas, read_replicas=read_replicas, create=False
        )
    else:
        assert data.path is not None and data.directory is not None
        if not holds_store(data.path):
            raise click.BadParameter(_no_store(data), param_hint="--data")
        require_keyring(data)
        # An absolute path: the residue scanner walks this directory, and with a relative root it
        # matched no file at all (a clean scan of nothing proves nothing).
        store = cenotaph.open(data.directory, auto_purge=auto_purge)
    try:
        yield store
    finally:
        store.close()


def _no_store(data: DataLocation) -> str:
    text = f"no cenotaph store in {data.given!r}; create one with `cenotaph init --data {data.given}`"
    if data.url is not None:
        text += f" (a URL without ?schema= names schema {POSTGRES_DEFAULT_SCHEMA!r})"
    return text


def require_keyring(data: DataLocation) -> Path:
    """The store's keyring directory, refused (bad input) if it holds no keyring."""
    keyring = data.keyring()
    missing = (
        not keyring.is_dir() if data.path is not None else not (keyring / LocalKeyring.KEYRING_FILE).is_file()
    )
    if missing:
        raise click.BadParameter(
            f"no keyring at {str(keyring)!r}; point {KEYRING_ENV} at this store's keyring",
            param_hint="--data",
        )
    return keyring


def api_key_ring(data: DataLocation, store: cenotaph.Store | None = None) -> ApiKeyRing:
    """The store's API keys: ``<data dir>/api-keys``, or for a PostgreSQL store
    ``<keyring dir>/api-keys`` (see ``location``); sealed under the store's key provider."""
    if data.path is not None:
        return ApiKeyRing(store if store is not None else data.path)
    return ApiKeyRing(data.api_keys_home(), key_provider=data.provider())


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
