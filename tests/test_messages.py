"""The CLI speaks CLI and the API speaks API, through one table (``cenotaph.cli.spelling``) of
the remedies the store's messages name (``cenotaph.remedies``).

Static checks read every string in the source (so a message added anywhere, by anyone, is
checked); the last tests drive real failures through the command line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.test_cli import USER, assert_one_line_error, ok_json, run

import cenotaph
from cenotaph.cli.spelling import API_ONLY, API_TO_CLI, speak_cli
from cenotaph.remedies import REMEDIES

SRC = Path(cenotaph.__file__).parent
REMEDIES_FILE = SRC / "remedies.py"  # the list of ids itself, not a message
CLI_DIR = SRC / "cli"
# the demo narrates the API and the CLI side by side on purpose; spelling.py is the table itself
BILINGUAL = {CLI_DIR / "demo.py", CLI_DIR / "spelling.py"}
# the HTTP server and its remote client speak to a server's users over the wire: what they can do
# next is a request, or an operator's command on the server (`cenotaph api-keys create`)
SERVER_SIDE = (SRC / "service" / "http", SRC / "client.py")

CLI_SPELLING = re.compile(r"`cenotaph [a-z][^`]*`")
# store.purge(), cenotaph.restore(), a bare purge(), include_ancestors=True, mode='compliance'
API_SPELLING = re.compile(
    r"\b(?:store|cenotaph)\.[a-z_]+\([^)]*\)"
    r"|(?<![\w.])[a-z_]+\(\)"
    r"|(?<![\w.-])[a-z_]+=(?:True|False|None|\.\.\.|'[^']*'|[A-Z]\w*\([^)]*\))"
    r"|\bkey_provider="
)
SQL = re.compile(
    r"^\s*(?:SELECT|INSERT|UPDATE|DELETE|CREATE|WITH|ALTER|DROP|PRAGMA)\b|\bFROM\b|\bWHERE\b|\bALTER TABLE\b"
)


def _strings(path: Path, *, docstrings: bool) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if not SQL.search(node.value) and (docstrings or id(node) not in docs):
            yield node.lineno, node.value


def _store_messages() -> Iterator[tuple[str, str]]:
    for path in sorted(SRC.rglob("*.py")):
        if path == REMEDIES_FILE:
            continue
        if CLI_DIR not in path.parents and not any(p == path or p in path.parents for p in SERVER_SIDE):
            for line, text in _strings(path, docstrings=False):
                yield f"{path.relative_to(SRC)}:{line}", text


def test_store_messages_never_spell_a_cli_command() -> None:
    found = [(where, m.group(0)) for where, text in _store_messages() for m in CLI_SPELLING.finditer(text)]
    assert not found, f"API messages naming CLI commands (use the API spelling; the CLI translates): {found}"


def test_every_api_spelling_in_a_store_message_has_a_cli_form() -> None:
    known = set(API_TO_CLI) | API_ONLY
    missing = [
        (where, m.group(0))
        for where, text in _store_messages()
        for m in API_SPELLING.finditer(text)
        if not any(m.group(0) in phrase and phrase in text for phrase in known)
    ]
    assert not missing, f"add these to cenotaph.cli.spelling (API_TO_CLI, or API_ONLY): {missing}"


def test_no_entry_of_the_table_is_dead() -> None:
    texts = [text for _, text in _store_messages()]
    dead = [api for api in (*API_TO_CLI, *API_ONLY) if not any(api in text for text in texts)]
    assert not dead, f"no store message uses these any more; remove them: {dead}"


def test_the_remedies_are_the_api_spellings_store_messages_use() -> None:
    texts = [text for _, text in _store_messages()]
    missing = [
        (where, m.group(0))
        for where, text in _store_messages()
        for m in API_SPELLING.finditer(text)
        if not any(m.group(0) in remedy and remedy in text for remedy in REMEDIES)
    ]
    assert not missing, f"add these to cenotaph.remedies.REMEDIES: {missing}"
    dead = sorted(r for r in REMEDIES if not any(r in text for text in texts))
    assert not dead, f"no store message names these any more; remove them from REMEDIES: {dead}"


def test_the_cli_table_covers_every_remedy_once() -> None:
    assert set(API_TO_CLI) | API_ONLY == REMEDIES
    assert not set(API_TO_CLI) & API_ONLY


def test_the_cli_speaks_cli_in_its_messages_and_help() -> None:
    found = [
        (f"{path.name}:{line}", m.group(0))
        for path in sorted(CLI_DIR.glob("*.py"))
        if path not in BILINGUAL
        for line, text in _strings(path, docstrings=True)
        for m in API_SPELLING.finditer(text)
    ]
    assert not found, f"CLI text spelled the API way: {found}"


def test_speak_cli_replaces_whole_spellings_once() -> None:
    assert speak_cli("run store.purge() and retry") == "run `cenotaph purge` and retry"
    assert speak_cli("release_backup() them, then rotate_keys()") == (
        "`cenotaph release-backup ID` them, then `cenotaph rotate-keys`"
    )
    assert speak_cli("with include_ancestors=True, or not") == "with --include-ancestors, or not"
    assert speak_cli("x.purge() and purge_all()") == "x.purge() and purge_all()"  # not a store call
    assert speak_cli("held by 'tenant:derived_from'") == "held by 'tenant:derived_from'"  # a caller's name
    assert speak_cli("nothing to translate") == "nothing to translate"
    for api, cli in API_TO_CLI.items():
        assert not API_SPELLING.search(speak_cli(f"then {api} again")), (api, cli)


# -- real failures through the command line -----------------------------------------------------
@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    assert run("init", "--data", str(directory)).exit_code == 0
    return directory


def test_cli_errors_speak_cli(data: Path) -> None:
    d = ("--data", str(data))
    session = f"{USER}/session:s1"
    ok_json("write", USER, "k", "v", *d)
    ok_json("write", session, "k", "v", *d)
    failures = [
        (("forget", session, "k"), 1, "--include-ancestors"),
        (("status", "er_unknown"), 1, "`cenotaph status`"),
        (("release-backup", "bk_unknown"), 1, "`cenotaph status`"),
        (("write", USER, "k", "v", "--reauthorization", "crt_bad"), 2, "`cenotaph reauthorize`"),
        (("write", USER, "x", "v", "--derived-from", "0" * 32), 2, "`cenotaph write`"),
        (("write", USER, "x", "v", "--base-version", "999"), 2, "--base-version 999"),
    ]
    ok_json("forget", USER, "gone", *d)
    failures.append((("write", USER, "gone", "v"), 1, "`cenotaph reauthorize`"))
    for args, code, wanted in failures:
        line = assert_one_line_error(run(*args, *d), code)
        assert wanted in line, (args, line)
        assert not API_SPELLING.search(line), (args, line)
