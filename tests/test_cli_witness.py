"""``cenotaph audit tree-head`` and ``cenotaph audit witness`` on a real data directory: the witness
saves a signed head, accepts a log that grew, and exits 1 naming both sizes when the log was
truncated, rewritten, forked or rolled back (keeping the head it saved)."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import cenotaph
from cenotaph.audit.chain import GENESIS, chain_entry, entry_from_dict, entry_to_dict
from cenotaph.cli.main import cli

USER = "tenant:acme/user:alice"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def ok_json(*args: str) -> Any:
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    assert run("init", "--data", str(directory)).exit_code == 0
    return directory


def _forget(data: Path, key: str) -> None:
    ok_json("write", USER, key, "v", "--data", str(data))
    ok_json("forget", USER, key, "--data", str(data))


def _rewrite_first_entry(data: Path) -> None:
    """Rewrite entry 1 and re-hash every later link, as someone with the database file could."""
    with contextlib.closing(sqlite3.connect(data / "cenotaph.db")) as db:
        rows = db.execute("SELECT entry FROM audit ORDER BY seq").fetchall()
        head = GENESIS
        for number, (text,) in enumerate(rows, 1):
            entry = entry_from_dict(json.loads(text))
            at = "2000-01-01T00:00:00+00:00" if number == 1 else entry.at
            new = chain_entry(head, entry.seq, at, entry.event, entry.fields)
            db.execute(
                "UPDATE audit SET entry = ? WHERE seq = ?", (json.dumps(entry_to_dict(new)), entry.seq)
            )
            head = new.head
        db.commit()


def test_tree_head_prints_a_signed_head(data: Path) -> None:
    _forget(data, "k")
    head = ok_json("audit", "tree-head", "--data", str(data))
    with cenotaph.open(data) as store:
        key = store.public_key
        assert head["tree_size"] == store.tree_head()["tree_size"] >= 1
    assert cenotaph.verify_consistency(head, head, [], key) == (head["tree_size"], head["tree_size"])


def test_the_witness_saves_a_head_and_accepts_a_log_that_grew(data: Path, tmp_path: Path) -> None:
    state = tmp_path / "witness.json"
    d = ("--data", str(data))
    first = ok_json("audit", "witness", str(state), *d)
    assert first["first_run"] is True and first["old_size"] is None
    _forget(data, "k1")
    second = ok_json("audit", "witness", str(state), *d)
    assert (second["old_size"], second["first_run"]) == (first["new_size"], False)
    assert second["new_size"] > second["old_size"]
    saved = json.loads(state.read_text())
    assert saved["tree_head"] == second["tree_head"] and len(saved["public_key"]) == 64
    assert ok_json("audit", "witness", str(state), *d)["old_size"] == second["new_size"]


def _copy_db(source: Path, target: Path) -> None:
    target.mkdir(exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        if (source / f"cenotaph.db{suffix}").exists():
            shutil.copy2(source / f"cenotaph.db{suffix}", target / f"cenotaph.db{suffix}")


@pytest.mark.parametrize("attack", ["truncate", "rewrite", "fork", "rollback"])
def test_the_witness_exits_1_naming_both_sizes(data: Path, tmp_path: Path, attack: str) -> None:
    state = tmp_path / "witness.json"
    d = ("--data", str(data))
    _forget(data, "k1")
    if attack == "rollback":
        _copy_db(data, tmp_path / "earlier")  # an old copy of the database, put back later
    _forget(data, "k2")
    kept = ok_json("audit", "witness", str(state), *d)["tree_head"]
    size = kept["tree_size"]
    if attack == "truncate":
        with contextlib.closing(sqlite3.connect(data / "cenotaph.db")) as db:
            db.execute("DELETE FROM audit WHERE seq = (SELECT MAX(seq) FROM audit)")
            db.commit()
        expected = f"shrank from {size} entries (saved head) to {size - 1}"
    elif attack == "rewrite":
        _rewrite_first_entry(data)
        _forget(data, "k3")  # and the log grows on: still not an extension of the saved head
        now = ok_json("audit", "tree-head", *d)["tree_size"]
        expected = f"the log of {now} entries does not extend the one of {size} entries"
    elif attack == "fork":
        _rewrite_first_entry(data)  # same size, another root
        expected = (
            f"the log of {size} entries does not extend the one of {size} entries: its history was forked"
        )
    else:
        _copy_db(tmp_path / "earlier", data)
        now = ok_json("audit", "tree-head", *d)["tree_size"]
        expected = (
            f"to {now}" if now < size else f"the log of {now} entries does not extend the one of {size}"
        )
    result = run("audit", "witness", str(state), *d)
    assert result.exit_code == 1, result.stdout
    assert expected in " ".join(result.stderr.split()), result.stderr
    assert json.loads(state.read_text())["tree_head"] == kept  # the witness keeps what it trusted


def test_a_damaged_state_file_is_refused_with_what_to_do(data: Path, tmp_path: Path) -> None:
    state = tmp_path / "witness.json"
    state.write_text("{not json")
    result = run("audit", "witness", str(state), "--data", str(data))
    assert result.exit_code == 1 and "not a witness state file" in result.stderr
    ok_json("audit", "witness", str(state.with_name("w2.json")), "--data", str(data))
    saved = json.loads(state.with_name("w2.json").read_text())
    saved["tree_head"]["tree_size"] += 1
    state.write_text(json.dumps(saved))
    result = run("audit", "witness", str(state), "--data", str(data))
    assert result.exit_code == 1 and "signature does not match" in result.stderr


def test_witness_url_needs_an_api_key_and_a_web_url(tmp_path: Path) -> None:
    state = str(tmp_path / "w.json")
    result = CliRunner(env={"CENOTAPH_API_KEY": None}).invoke(
        cli, ["audit", "witness", state, "--url", "http://127.0.0.1:9"], catch_exceptions=False
    )
    assert result.exit_code == 2 and "--api-key" in result.stderr
    result = run("audit", "witness", state, "--url", "file:///etc/passwd", "--api-key", "k")
    assert result.exit_code == 2 and "http:// or https://" in result.stderr


def test_the_witness_checks_the_key_it_is_told_to_expect(data: Path, tmp_path: Path) -> None:
    with cenotaph.open(data) as store:
        key = store.public_key
    other = "ab" * 32
    state = tmp_path / "w.json"
    wrong = run("audit", "witness", str(state), "--public-key", other, "--data", str(data))
    assert wrong.exit_code == 1 and "another public key than --public-key" in wrong.stderr
    assert not state.exists()  # nothing saved from a store signing with an unexpected key
    ok_json("audit", "witness", str(state), "--public-key", key, "--data", str(data))
    again = run("audit", "witness", str(state), "--public-key", other, "--data", str(data))
    assert again.exit_code == 1 and "saved heads signed by another key" in again.stderr
    bad = run("audit", "witness", str(state), "--public-key", "xyz", "--data", str(data))
    assert bad.exit_code == 2 and "64 hex" in bad.stderr
