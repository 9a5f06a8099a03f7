"""``cenotaph audit tree-head`` and ``cenotaph audit witness``: keep the store's signed heads honest.

A witness keeps the last signed tree head it saw (and the public key it first saw) in a state file.
Each run fetches the current head and a consistency proof from the saved size, checks both under
the saved key, and only then saves the new head: a log that was truncated, rolled back, rewritten
or forked since the last run fails, naming both sizes.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

import cenotaph
from cenotaph.errors import CertificateError

from .options import DataLocation, data_option, open_existing_store
from .output import emit, table_option

__all__ = ["tree_head", "witness"]

API_KEY_ENV = "CENOTAPH_API_KEY"
_KEY_HEX = re.compile(r"[0-9a-fA-F]{64}")
_TIMEOUT_S = 30.0


@click.command("tree-head")
@data_option
@table_option
def tree_head(data: DataLocation, table: bool) -> None:
    """Print a signed tree head over the audit log.

    {"tree_size", "root_hash", "timestamp", "signature"}: the RFC 9162 Merkle root of every audit
    entry, signed with the store's Ed25519 key (the public_key certificates carry).
    Keep it: `cenotaph audit witness` proves later heads extend it.
    """
    with open_existing_store(data) as store:
        emit(store.tree_head(), table=table)


class _Source:
    """Where the witness asks: a store it opens, or a server's /v1/log routes."""

    def __init__(
        self, public_key: Callable[[], str], head: Callable[[], Any], proof: Callable[[int], Any]
    ) -> None:
        self.public_key, self.head, self.proof = public_key, head, proof


@click.command()
@click.argument("state_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--url",
    default=None,
    help="A cenotaph server's base URL (asks GET /v1/log/head and /v1/log/consistency).",
)
@click.option(
    "--api-key",
    envvar=API_KEY_ENV,
    show_envvar=True,
    default=None,
    help="The API key for --url (any role; the log holds no content).",
)
@click.option(
    "--public-key",
    "expected_key",
    metavar="HEX",
    default=None,
    help="The store's public key as you know it (64 hex characters): the heads must be signed by it, "
    "the first run's too.",
)
@data_option
@table_option
def witness(
    state_file: Path,
    url: str | None,
    api_key: str | None,
    expected_key: str | None,
    data: DataLocation,
    table: bool,
) -> None:
    """Check the audit log still extends the head saved in STATE_FILE, then save the new head.

    The first run saves the store's head and public key (trust on first use, unless --public-key
    names the key to expect). Every later run checks the current head is signed by that key and
    that a consistency proof shows it extends the saved one; exits 1 naming both sizes when the
    log was truncated, rolled back, rewritten or forked, and keeps the saved head. Run it from
    somewhere the store's operator cannot write.
    """
    if expected_key is not None and not _KEY_HEX.fullmatch(expected_key):
        raise click.BadParameter(
            "expected 64 hex characters (the store's public_key)", param_hint="--public-key"
        )
    saved = _load(state_file)
    if expected_key is not None and saved is not None and saved["public_key"] != expected_key.lower():
        raise CertificateError(
            f"{state_file} saved heads signed by another key than --public-key; give a new state file "
            "to witness this key"
        )
    if url is not None:
        result = _run(saved, _remote(url, api_key), expected_key)
    else:
        with open_existing_store(data) as store:
            source = _Source(lambda: store.public_key, store.tree_head, store.consistency_proof)
            result = _run(saved, source, expected_key)
    _save(state_file, {"public_key": result.pop("public_key"), "tree_head": result["tree_head"]})
    emit(result, table=table)


def _run(saved: dict[str, Any] | None, source: _Source, expected_key: str | None) -> dict[str, Any]:
    key = source.public_key()
    if expected_key is not None and key.lower() != expected_key.lower():
        raise CertificateError(
            "the store signs with another public key than --public-key: do not trust its heads until "
            "you know why"
        )
    if saved is None:
        head = source.head()
        size = _check_head(head, key)
        return {
            "ok": True,
            "first_run": True,
            "old_size": None,
            "new_size": size,
            "tree_head": head,
            "public_key": key,
        }
    if key != saved["public_key"]:
        raise CertificateError(
            "the store now signs with another public key than the one this witness saved: its heads "
            "cannot be compared; find out why the key changed before trusting the store"
        )
    old = saved["tree_head"]
    old_size = old["tree_size"]
    now = source.head()
    new_size = _check_head(now, key)
    if new_size < old_size:
        raise CertificateError(
            f"the log shrank from {old_size} entries (saved head) to {new_size}: it was truncated or rolled back"
        )
    answer = source.proof(old_size)
    if not isinstance(answer, dict) or "tree_head" not in answer or "proof" not in answer:
        raise CertificateError("the consistency proof's answer is malformed (expected tree_head and proof)")
    sizes = cenotaph.verify_consistency(old, answer["tree_head"], answer["proof"], key)
    return {
        "ok": True,
        "first_run": False,
        "old_size": sizes[0],
        "new_size": sizes[1],
        "tree_head": answer["tree_head"],
        "public_key": key,
    }


def _check_head(head: object, key: str) -> int:
    """The size of a head ``key`` signed (a head is trivially consistent with itself)."""
    return cenotaph.verify_consistency(head, head, [], key)[0]


def _load(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise click.ClickException(f"cannot read the witness state {path}: {exc.strerror}") from None
    try:
        state = json.loads(text)
    except ValueError:
        state = None
    head = state.get("tree_head") if isinstance(state, dict) else None
    if not (isinstance(state, dict) and isinstance(state.get("public_key"), str) and isinstance(head, dict)):
        raise click.ClickException(
            f"{path} is not a witness state file (JSON with public_key and tree_head); give a new path to start over"
        )
    _check_head(head, state["public_key"])  # still signed as saved
    return state


def _save(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically: a crash leaves the old head or the new, never half."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=".witness-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(state, out, indent=2, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remote(url: str, api_key: str | None) -> _Source:
    if not api_key:
        raise click.UsageError(f"--url needs an API key: pass --api-key or set {API_KEY_ENV}")
    if urllib.parse.urlparse(url).scheme not in ("http", "https"):
        raise click.UsageError(f"--url must be an http:// or https:// URL of a cenotaph server, not {url!r}")
    base = url.rstrip("/")

    def get(path: str, auth: bool = True) -> Any:
        request = urllib.request.Request(base + path, headers={"Accept": "application/json"})  # noqa: S310 - http(s) only
        if auth:
            request.add_header("Authorization", f"Bearer {api_key}")
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:  # noqa: S310 - http(s), checked above
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise click.ClickException(f"{base}{path} answered {exc.code}: {_message(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise click.ClickException(f"cannot reach {base}: {getattr(exc, 'reason', exc)}") from None
        except ValueError:
            raise click.ClickException(
                f"{base}{path} did not answer JSON; is --url a cenotaph server?"
            ) from None

    def public_key() -> str:
        answer = get("/v1/public-key", auth=False)
        key = answer.get("public_key") if isinstance(answer, dict) else None
        if not isinstance(key, str):
            raise click.ClickException(f"{base}/v1/public-key did not answer a public_key")
        return key

    return _Source(
        public_key,
        lambda: get("/v1/log/head"),
        lambda size: get("/v1/log/consistency?" + urllib.parse.urlencode({"from": size})),
    )


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
    except (ValueError, OSError):
        return "no readable answer"
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message else "no message"
