"""A read-only data directory: every read works, every write is refused naming the file, and
nothing on disk changes.

Permissions are tested for real (``chmod``), by a user they apply to. Root ignores file modes, so
when the suite runs as root each check runs in a forked child that first drops to ``nobody``
(``os.setuid``); otherwise it runs in-process. The child inherits the modules the parent already
imported (a warm-up imports what the commands load lazily), since ``nobody`` may not be able to
read this interpreter's own files.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import cenotaph
from cenotaph.cli.main import cli
from cenotaph.errors import CenotaphError, KeyProviderError, StorageError

USER = "tenant:acme/user:alice"
BOB = "tenant:acme/user:bob"
NOBODY = 65534
AS_ROOT = os.geteuid() == 0


def as_unprivileged(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` as a user file modes apply to; return its result (or raise what it raised)."""
    if not AS_ROOT:
        return fn()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, run, send the outcome back, never return
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            outcome: tuple[str, Any] = ("ok", fn())
        except BaseException as exc:
            outcome = ("raised", (type(exc).__name__, str(exc), traceback.format_exc()))
        with os.fdopen(write_end, "wb") as out:
            pickle.dump(outcome, out)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as incoming:
        outcome = pickle.load(incoming)
    os.waitpid(pid, 0)
    kind, value = outcome
    if kind == "raised":
        raise ChildError(*value)
    return value


class ChildError(Exception):
    def __init__(self, name: str, message: str, trace: str) -> None:
        super().__init__(f"{name}: {message}\n{trace}")
        self.name, self.message = name, message


def cli_run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def fingerprint(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def make_read_only(root: Path) -> None:
    """What an operator does: the tree belongs to the user and nobody may write it."""
    for path in [root, *root.rglob("*")]:
        if AS_ROOT:
            os.chown(path, NOBODY, NOBODY)
        mode = stat.S_IMODE(path.stat().st_mode)
        path.chmod(mode & ~0o222)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CENOTAPH_DATA", "CENOTAPH_KEYRING", "CENOTAPH_MASTER_KEY", "CENOTAPH_DEBUG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def _warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Run every command once, so whatever they import lazily is loaded before a child drops root."""
    data = str(tmp_path_factory.mktemp("warm") / "data")
    cli_run("init", "--data", data)
    cli_run("write", USER, "k", "v", "--data", data)
    cli_run("write", USER, "k2", "-", "--data", data)
    for args in (("read", USER, "k"), ("search", USER, "v"), ("export", USER), ("list", USER)):
        for table in ((), ("--table",)):
            cli_run(*args, *table, "--data", data)
    with cenotaph.open(data, auto_purge="off") as store:
        store.forget(USER, "k2")
        store.purge()
    commands: tuple[tuple[str, ...], ...] = (
        ("status",),
        ("audit", "verify"),
        ("doctor",),
        ("purge",),
        ("rotate-keys",),
    )
    for command in commands:
        for table in ((), ("--table",)):
            cli_run(*command, *table, "--data", data)
    "x".encode("utf-16-le"), "x".encode("utf-16-be")


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory ``nobody`` can reach (pytest's own is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="cenotaph-ro-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for path in [base, *base.rglob("*")]:
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o700)
        shutil.rmtree(base)


@pytest.fixture
def store_dir(shared_tmp: Path, _warm: None) -> dict[str, Any]:
    """A store with a live record, a verified erasure and its certificate, made read-only."""
    data = shared_tmp / "data"
    with cenotaph.open(data, auto_purge="sync") as store:  # a verified request to attest
        kept = store.write(USER, "note", "cardiology appointment on Tuesday")
        store.write(BOB, "note", "bob's secret")
        request = store.forget(BOB)
        certificate = store.attest(request.id)
        public_key = store.public_key
    cert_file = shared_tmp / "cert.json"
    cert_file.write_text(certificate.to_json())
    cert_file.chmod(0o644)
    make_read_only(data)
    return {
        "data": data,
        "kept": kept.id,
        "request": request.id,
        "cert": str(cert_file),
        "public_key": public_key,
        "before": fingerprint(data),
    }


def test_the_check_really_runs_without_write_permission(store_dir: dict[str, Any]) -> None:
    def probe() -> bool:
        try:
            (store_dir["data"] / "probe").touch()
        except PermissionError:
            return True
        return False

    assert as_unprivileged(probe), "the child could write the read-only directory (root?)"


READS = [
    ("read", USER, "note"),
    ("list", "tenant:acme", "--descendants"),
    ("search", USER, "cardiology"),
    ("export", USER),
    ("status",),
    ("audit", "verify"),
    ("doctor",),
]


def test_every_read_command_works_on_a_read_only_directory(store_dir: dict[str, Any]) -> None:
    data = str(store_dir["data"])

    def reads() -> dict[str, Any]:
        out: dict[str, Any] = {" ".join(args): cli_run(*args, "--data", data) for args in READS}
        out["status ID"] = cli_run("status", store_dir["request"], "--data", data)
        out["verify-cert"] = cli_run(
            "verify-cert", store_dir["cert"], "--public-key", store_dir["public_key"]
        )
        out["tables"] = [cli_run(*args, "--table", "--data", data)[0] for args in READS]
        return out

    out = as_unprivileged(reads)
    for name, (code, stdout, stderr) in ((k, v) for k, v in out.items() if k != "tables"):
        assert code == 0, (name, stdout, stderr)
        assert "Traceback" not in stderr
    assert (
        json.loads(out["read tenant:acme/user:alice note"][1])["value"] == "cardiology appointment on Tuesday"
    )
    listed = json.loads(out["list tenant:acme --descendants"][1])
    assert [r["id"] for r in listed] == [store_dir["kept"]]  # bob's record stays forgotten
    assert (
        json.loads(out["search tenant:acme/user:alice cardiology"][1])[0]["record"]["id"] == store_dir["kept"]
    )
    assert json.loads(out["status ID"][1])["status"]["state"] == "verified"
    assert json.loads(out["audit verify"][1])["ok"] is True
    assert json.loads(out["verify-cert"][1])["valid"] is True
    doctor = {c["name"]: c for c in json.loads(out["doctor"][1])["checks"]}
    assert doctor["data directory"]["status"] == "warn" and "read-only" in doctor["data directory"]["detail"]
    assert out["tables"] == [0] * len(READS)
    assert fingerprint(store_dir["data"]) == store_dir["before"]  # reading changed no byte


WRITES = [
    ("write", USER, "new", "v"),
    ("forget", USER, "note"),
    ("forget-subject", USER),
    ("reauthorize", USER),
    ("purge",),
    ("rotate-keys",),
    ("attest", "{request}"),
    ("backup", "{backup}"),
]


def test_every_write_command_is_refused_naming_the_file(store_dir: dict[str, Any], shared_tmp: Path) -> None:
    data = str(store_dir["data"])
    backup = shared_tmp / "backups"
    backup.mkdir()
    if AS_ROOT:
        os.chown(backup, NOBODY, NOBODY)

    def writes() -> list[tuple[tuple[str, ...], int, str, str]]:
        results = []
        for args in WRITES:
            filled = tuple(a.format(request=store_dir["request"], backup=backup / "b1") for a in args)
            results.append((filled, *cli_run(*filled, "--data", data)))
        return results

    for args, code, stdout, stderr in as_unprivileged(writes):
        assert code == 1, (args, stdout, stderr)
        [line] = stderr.splitlines()
        assert line.startswith("error: ") and "Traceback" not in stderr, (args, stderr)
        assert str(store_dir["data"]) in line, (args, line)  # names the file or directory
        assert line.removeprefix("error: ") != "Permission denied"
    assert fingerprint(store_dir["data"]) == store_dir["before"]
    assert not any(backup.rglob("*.db")) and not any(backup.rglob("*.json"))  # no backup was left


def test_the_api_reads_and_refuses_with_its_own_errors(store_dir: dict[str, Any]) -> None:
    def api() -> dict[str, Any]:
        found: dict[str, Any] = {}
        with cenotaph.open(store_dir["data"]) as store:
            found["read"] = store.read(USER, "note").value  # type: ignore[union-attr]
            found["get"] = store.get(store_dir["kept"]) is not None
            found["bob"] = store.read(BOB, "note")
            found["export"] = len(store.export_subject(USER)["records"])
            found["state"] = store.confirm_erasure(store_dir["request"]).state
            for name, call in (
                ("write", lambda: store.write(USER, "new", 1)),
                ("forget", lambda: store.forget(USER, "note")),
                ("rotate", store.rotate_keys),
                ("purge", store.purge),
            ):
                try:
                    call()
                except CenotaphError as exc:
                    found[name] = (type(exc).__name__, str(exc))
                except OSError as exc:
                    found[name] = ("raw " + type(exc).__name__, str(exc))
            found["still"] = store.read(USER, "note") is not None
        return found

    found = as_unprivileged(api)
    assert found["read"] == "cardiology appointment on Tuesday" and found["get"] and found["bob"] is None
    assert found["export"] == 1 and found["state"] == "verified" and found["still"]
    for name in ("write", "forget", "rotate", "purge"):
        kind, message = found[name]
        assert kind in (StorageError.__name__, KeyProviderError.__name__), (name, kind, message)
        assert str(store_dir["data"]) in message, (name, message)
    assert fingerprint(store_dir["data"]) == store_dir["before"]


def test_reads_see_commits_still_in_the_wal(shared_tmp: Path, _warm: None) -> None:
    """A store left with its -wal and -shm (a crash, or another process holding it open) is read
    through them: the newest commit is there, not silently dropped."""
    data = shared_tmp / "data"
    child = (
        "import os, sys, cenotaph\n"
        "s = cenotaph.open(sys.argv[1])\n"
        "s.write('tenant:acme/user:alice', 'k', 'first')\n"
        "s.write('tenant:acme/user:alice', 'k', 'newest')\n"
        "os._exit(0)  # no close: the WAL is not checkpointed away\n"
    )
    subprocess.run([sys.executable, "-c", child, str(data)], check=True, timeout=120)
    assert (data / "cenotaph.db-wal").stat().st_size > 0
    make_read_only(data)

    def read() -> Any:
        with cenotaph.open(data) as store:
            return store.read(USER, "k").value  # type: ignore[union-attr]

    assert as_unprivileged(read) == "newest"


def test_a_forget_in_the_ledger_but_not_the_database_fails_reads_closed(
    shared_tmp: Path, _warm: None
) -> None:
    """The ledger says a forget happened that the read-only database cannot apply: no read may
    serve from the stale database."""
    data = shared_tmp / "data"
    with cenotaph.open(data) as store:
        store.write(USER, "note", "must not be served")
    child = "import sys, cenotaph\ncenotaph.open(sys.argv[1]).forget('tenant:acme/user:alice')\n"
    env = {**os.environ, "CENOTAPH_FAULT": "forget.ledgered"}
    killed = subprocess.run([sys.executable, "-c", child, str(data)], env=env, timeout=120)
    assert killed.returncode == -9  # SIGKILL after the ledger entry, before the commit
    make_read_only(data)

    def read() -> Any:
        with cenotaph.open(data) as store:
            return store.read(USER, "note")

    with pytest.raises(ChildError) as info:
        as_unprivileged(read)
    assert info.value.name == "StorageError" and str(data) in info.value.message


def test_a_read_only_keyring_alone_still_serves_reads(shared_tmp: Path, _warm: None) -> None:
    data, keys = shared_tmp / "data", shared_tmp / "keys"
    os.environ["CENOTAPH_KEYRING"] = str(keys)
    try:
        with cenotaph.open(data) as store:
            store.write(USER, "k", "v")
        if AS_ROOT:
            for path in [data, *data.rglob("*")]:
                os.chown(path, NOBODY, NOBODY)
        make_read_only(keys)  # the keyring is read-only, the data directory is not

        def use() -> tuple[Any, str]:
            with cenotaph.open(data) as store:
                value = store.read(USER, "k").value  # type: ignore[union-attr]
                try:
                    store.forget(USER, "k")
                except CenotaphError as exc:
                    return value, f"{type(exc).__name__}: {exc}"
            return value, "forget was not refused"

        value, refusal = as_unprivileged(use)
    finally:
        del os.environ["CENOTAPH_KEYRING"]
    assert value == "v"
    assert refusal.startswith("KeyProviderError") and str(keys) in refusal


def test_an_unreadable_data_directory_is_named_not_a_raw_permission_error(
    shared_tmp: Path, _warm: None
) -> None:
    data = shared_tmp / "data"
    cenotaph.open(data).close()
    make_read_only(data)
    data.chmod(0)

    def open_it() -> str:
        try:
            cenotaph.open(data)
        except CenotaphError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "opened"

    outcome = as_unprivileged(open_it)
    assert outcome.startswith("StorageError") and str(data) in outcome
    code, _, stderr = as_unprivileged(lambda: cli_run("status", "--data", str(data)))
    assert code in (1, 2) and str(data) in stderr and "Traceback" not in stderr


def test_a_read_only_database_file_leaves_nothing_that_blocks_the_next_writer(
    shared_tmp: Path, _warm: None
) -> None:
    """chmod a-w on cenotaph.db alone: reads work and create no -wal or -shm (SQLite would make
    them read-only like the file, and they would refuse the writer once write permission is back)."""
    data = shared_tmp / "data"
    with cenotaph.open(data) as store:
        store.write(USER, "k", "v")
    if AS_ROOT:
        for path in [data, *data.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
    (data / "cenotaph.db").chmod(0o444)

    def read_then_fail_to_write() -> tuple[Any, str]:
        with cenotaph.open(data) as store:
            value = store.read(USER, "k").value  # type: ignore[union-attr]
            try:
                store.write(USER, "k2", "v")
            except StorageError as exc:
                return value, str(exc)
        return value, "written"

    value, refusal = as_unprivileged(read_then_fail_to_write)
    assert value == "v" and "cenotaph.db" in refusal and "read-only" in refusal
    assert sorted(p.name for p in data.iterdir()) == ["cenotaph.db", "keyring"]
    (data / "cenotaph.db").chmod(0o644)

    def write() -> Any:
        with cenotaph.open(data) as store:
            return store.write(USER, "k2", "v2").value

    assert as_unprivileged(write) == "v2"
