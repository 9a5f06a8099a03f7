"""The ``cenotaph`` command line on a PostgreSQL store.

``--data postgresql://...?schema=NAME`` (and ``CENOTAPH_DATA``) reaches the store on every command,
the keyring coming from ``CENOTAPH_KEYRING``; no URL ever becomes a local directory; only ``init``
creates a store; the URL's password appears in no output. ``doctor`` checks the server, the schema,
the role's privileges, each replica of ``CENOTAPH_REPLICAS`` and when VACUUM is due. ``serve`` and
``mcp --api-keys`` run as real processes and authenticate the keys kept beside the keyring.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql

from cenotaph.cli.main import cli

from ._cluster import _free_port
from .conftest import schema_url

USER = "tenant:acme/user:alice"
ENV_VARS = (
    "CENOTAPH_DATA",
    "CENOTAPH_KEYRING",
    "CENOTAPH_MASTER_KEY",
    "CENOTAPH_REPLICAS",
    "CENOTAPH_READ_REPLICAS",
    "CENOTAPH_DEBUG",
)
CLI = [sys.executable, "-m", "cenotaph.cli.main"]
KG_FILE = (
    '{"type":"entity","name":"Alice","entityType":"person","observations":["likes coffee"]}\n'
    '{"type":"entity","name":"Acme","entityType":"company","observations":[]}\n'
    '{"type":"relation","from":"Alice","to":"Acme","relationType":"works_at"}\n'
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # a URL made into a directory would appear here


@pytest.fixture
def secret_dsn(pg_dsn: str) -> tuple[str, str | None]:
    """The shared server's address with a password in it (the server may ignore it), and that
    password; the plain address if the server refuses a password it does not expect."""
    parts = urlsplit(pg_dsn)
    if parts.password:
        return pg_dsn, parts.password
    secret = f"pw-{uuid.uuid4().hex[:10]}"
    user = parts.username or "postgres"
    host = parts.netloc.rpartition("@")[2]
    dsn = urlunsplit(parts._replace(netloc=f"{user}:{secret}@{host}"))
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error:
        return pg_dsn, None
    return dsn, secret


@pytest.fixture
def keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "keyring"
    monkeypatch.setenv("CENOTAPH_KEYRING", str(path))
    return path


@pytest.fixture
def url(secret_dsn: tuple[str, str | None], schemas: Callable[[], str]) -> str:
    """A fresh schema's URL (with a password when the server takes one)."""
    return schema_url(secret_dsn[0], schemas())


@pytest.fixture
def store_url(url: str, keyring: Path) -> str:
    """A store made by ``cenotaph init`` in a fresh schema."""
    result = run("init", "--data", url)
    assert result.exit_code == 0, result.stderr
    assert _schema_exists(split_url(url)[0], _schema_of(url)), "init made no schema"
    return url


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin, catch_exceptions=False)


def ok(*args: str, stdin: str | None = None) -> Any:
    result = run(*args, stdin=stdin)
    assert result.exit_code == 0, (args, result.stderr)
    return json.loads(result.stdout) if result.stdout.strip() else None


def _schema_exists(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def split_url(url: str) -> tuple[str, str]:
    """The server's address and the schema of a URL this file made (``_url``)."""
    address, _, schema = url.rpartition("schema=")
    return address[:-1], schema


def _rows(url: str, table: str) -> int:
    address, schema = split_url(url)
    with psycopg.connect(address) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))
        ).fetchone()
    return 0 if row is None else int(row[0])


def _schema_of(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


def _no_url_directories(root: Path) -> None:
    made = [p for p in root.rglob("*") if p.name.lower().startswith("postgres")]
    assert not made, f"a URL became a local path: {made}"


# -- every command ---------------------------------------------------------------------------------
def test_every_command_reaches_the_store_and_no_url_becomes_a_path(
    tmp_path: Path,
    secret_dsn: tuple[str, str | None],
    schemas: Callable[[], str],
    keyring: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dsn, secret = secret_dsn
    url, restored = schema_url(dsn, schemas()), schema_url(dsn, schemas())
    outputs: list[str] = []

    def cmd(*args: str, stdin: str | None = None) -> Any:
        result = run(*args, "--data", url, stdin=stdin)
        outputs.append(result.stdout + result.stderr)
        assert result.exit_code == 0, (args, result.stderr)
        try:
            return json.loads(result.stdout)
        except ValueError:  # JSON lines (kg export), or nothing
            return result.stdout

    made = cmd("init")
    assert made["created"] is True and made["keyring"] == str(keyring.resolve())
    assert made["data"].startswith("postgresql://") and made["keyring_inside_data"] is False
    assert cmd("init")["created"] is False  # safe to run again
    kept = cmd("write", USER, "city", "Lisbon")
    cmd("write", USER, "diet", "vegetarian")
    assert cmd("read", USER, "diet")["value"] == "vegetarian"
    assert {r["key"] for r in cmd("list", USER)} == {"city", "diet"}
    assert cmd("search", USER, "Lisbon")[0]["record"]["id"] == kept["id"]
    forgotten = cmd("forget", USER, "diet")
    assert forgotten["status"]["state"] == "verified", forgotten  # waited for the purge and the scan
    token = cmd("reauthorize", USER, "diet")["token"]
    cmd("write", USER, "diet", "vegan", "--reauthorization", token)
    assert cmd("status", forgotten["id"])["status"]["state"] == "verified"
    assert cmd("attest", forgotten["id"])["request_id"] == forgotten["id"]
    cmd("purge")
    assert cmd("export", USER)["records"]
    cmd("rotate-keys")
    assert cmd("audit", "verify")["ok"] is True
    assert cmd("doctor")["ok"] is True
    cmd("kg", "import", "-", "--prefix", "tenant:acme/user:bob", stdin=KG_FILE)
    assert "works_at" in cmd("kg", "export", "--prefix", "tenant:acme/user:bob")
    key = cmd("api-keys", "create", "--tenant", "acme", "--prefix", USER)
    assert (keyring / "api-keys" / "keys.json").is_file()  # beside the keyring: no data directory
    assert [k["id"] for k in cmd("api-keys", "list")] == [key["id"]]
    backup = cmd("backup", str(tmp_path / "backup"))
    assert backup["id"] in cmd("status")["backups"]
    cmd("release-backup", backup["id"])
    back = run("restore", str(tmp_path / "backup"), "--data", restored, "--keyring", str(keyring))
    outputs.append(back.stdout + back.stderr)
    assert back.exit_code == 0, back.stderr
    assert json.loads(back.stdout)["data"].endswith(f"schema={_schema_of(restored)}")
    cmd("forget-subject", USER)
    assert [k["erased_at"] is not None for k in cmd("api-keys", "list")] == [True]  # its key went with it
    cmd("api-keys", "revoke", key["id"])
    monkeypatch.setenv("CENOTAPH_DATA", url)  # the environment variable takes a URL too
    status = ok("status")
    assert status["data"].endswith(f"schema={_schema_of(url)}")
    assert ok("--data", restored, "status")["erasures"]["total"] >= 1  # before the command as well

    _no_url_directories(tmp_path)
    if secret is not None:
        assert not [o for o in outputs if secret in o], "the URL's password was shown"


def test_every_store_command_takes_a_url() -> None:
    """Each command with --data accepts a URL as its value (a path-only option would be a local
    directory named after it): the option's type is the one that tells them apart."""
    from cenotaph.cli.location import DataType

    def walk(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for name, command in sorted(group.commands.items()):
            yield prefix + name, command
            if hasattr(command, "commands"):
                yield from walk(command, f"{prefix}{name} ")

    missing = [
        name
        for name, command in walk(cli)
        for param in command.params
        if param.name == "data" and not isinstance(param.type, DataType)
    ]
    assert not missing


# -- refusals --------------------------------------------------------------------------------------
def test_a_url_without_cenotaph_keyring_is_refused_and_nothing_is_made(
    tmp_path: Path, pg_dsn: str, url: str, schemas: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run("init", "--data", url)
    assert result.exit_code == 2 and "CENOTAPH_KEYRING" in result.stderr, result.stderr
    assert not _schema_exists(pg_dsn, _schema_of(url))
    monkeypatch.setenv("CENOTAPH_KEYRING", str(tmp_path / "keyring"))
    ok("init", "--data", url)
    monkeypatch.delenv("CENOTAPH_KEYRING")
    for args in (("list", USER), ("status",), ("api-keys", "list"), ("serve",), ("mcp", "--scope", USER)):
        result = run(*args, "--data", url)
        assert result.exit_code == 2, (args, result.stderr)
        assert "CENOTAPH_KEYRING" in result.stderr and len(result.stderr.splitlines()) == 1, (
            args,
            result.stderr,
        )
    doctor = run("doctor", "--data", url)
    assert doctor.exit_code == 1 and _checks(json.loads(doctor.stdout))["keyring"]["status"] == "fail"
    _no_url_directories(tmp_path)


def test_only_init_creates_a_store(tmp_path: Path, pg_dsn: str, url: str, keyring: Path) -> None:
    for args in (
        ("list", USER),
        ("status",),
        ("purge",),
        ("api-keys", "list"),
        ("kg", "export", "--prefix", USER),
    ):
        result = run(*args, "--data", url)
        assert result.exit_code == 2, (args, result.stderr)
        assert "cenotaph init" in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert run("doctor", "--data", url).exit_code == 1
    assert not _schema_exists(pg_dsn, _schema_of(url))
    assert not keyring.exists(), "a command other than init made a keyring"
    assert ok("init", "--data", url)["created"] is True
    assert _schema_exists(pg_dsn, _schema_of(url))


def test_init_on_the_wrong_schema_says_so_and_makes_nothing(
    pg_dsn: str, store_url: str, schemas: Callable[[], str]
) -> None:
    ok("write", USER, "k", "v", "--data", store_url)
    ok("forget", USER, "k", "--data", store_url)  # the keyring has history now
    wrong = schemas()
    result = run("init", "--data", schema_url(pg_dsn, wrong))
    assert result.exit_code == 2, result.stderr
    assert "holds no cenotaph store" in result.stderr and "?schema=" in result.stderr
    assert "altered" not in result.stderr
    assert not _schema_exists(pg_dsn, wrong)


@pytest.mark.parametrize("value", ["mysql://db/prod", "postgresql:/127.0.0.1/test", "postgres:db"])
def test_a_url_that_is_not_postgresql_is_not_a_directory(tmp_path: Path, value: str) -> None:
    result = run("init", "--data", value)
    assert result.exit_code == 2 and "postgresql://" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("variable", ["CENOTAPH_REPLICAS", "CENOTAPH_READ_REPLICAS"])
def test_replicas_of_a_data_directory_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "postgresql://u:pw-x@127.0.0.1:1/test")
    result = run("status", "--data", str(tmp_path / "data"))
    assert result.exit_code == 2 and variable in result.stderr and "pw-x" not in result.stderr


# -- doctor ----------------------------------------------------------------------------------------
def _checks(doc: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in doc["checks"]}


def test_doctor_checks_the_server_schema_privileges_replicas_and_vacuum(store_url: str) -> None:
    result = run("doctor", "--data", store_url)
    assert result.exit_code == 0, result.stdout
    checks = _checks(json.loads(result.stdout))
    for name in (
        "postgresql connection",
        "postgresql schema",
        "postgresql privileges",
        "postgresql page scan",
        "postgresql replicas",
    ):
        assert checks[name]["status"] == "ok", checks[name]
    assert checks["postgresql vacuum"]["status"] in ("ok", "warn")  # the server's autovacuum decides
    assert "holds a cenotaph store" in checks["postgresql schema"]["detail"]
    assert {"audit chain", "ledger agreement", "keyring opens"} <= set(checks)
    assert run("doctor", "--table", "--data", store_url).exit_code == 0


@pytest.mark.parametrize("variable", ["CENOTAPH_REPLICAS", "CENOTAPH_READ_REPLICAS"])
def test_doctor_names_an_unreachable_replica_without_its_password(
    store_url: str, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    port = _free_port()
    monkeypatch.setenv(variable, f"postgresql://postgres:pw-replica@127.0.0.1:{port}/test")
    result = run("doctor", "--data", store_url)
    assert result.exit_code == 1
    check = _checks(json.loads(result.stdout))[f"postgresql replica 127.0.0.1:{port}"]
    assert check["status"] == "fail" and "cannot be reached" in check["detail"]
    assert "pw-replica" not in result.stdout + result.stderr


def test_doctor_says_when_vacuum_is_due(pg_dsn: str, store_url: str) -> None:
    table = sql.Identifier(_schema_of(store_url), "change_marker")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET application_name = 'cenotaph-test-dead-tuples'")
        for _ in range(120):  # one live row, 120 dead versions of it: past 50 + 20% of one row
            conn.execute(sql.SQL("UPDATE {} SET value = value").format(table))
    deadline = time.monotonic() + 30
    while True:  # the statistics reach pg_stat_user_tables once that session has reported them
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'change_marker'",
                (_schema_of(store_url),),
            ).fetchone()
        if row is not None and int(row[0]) >= 100:
            break
        assert time.monotonic() < deadline, "the server never counted the dead tuples"
        time.sleep(0.1)
    check = _checks(ok("doctor", "--data", store_url))["postgresql vacuum"]
    assert check["status"] == "warn" and "change_marker" in check["detail"], check
    assert "dead tuples" in check["detail"]


def test_doctor_names_the_privileges_a_role_lacks(pg_dsn: str, store_url: str) -> None:
    schema = _schema_of(store_url)
    role = f"t_role_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role))
        )
        conn.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
                sql.Identifier(schema), sql.Identifier(role)
            )
        )
    try:
        parts = urlsplit(pg_dsn)
        as_role = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))
        try:
            psycopg.connect(as_role, connect_timeout=5).close()
        except psycopg.Error:
            pytest.skip("the shared server does not let a new role log in without a password")
        result = run("doctor", "--data", schema_url(as_role, schema))
        assert result.exit_code == 1
        check = _checks(json.loads(result.stdout))["postgresql privileges"]
        assert check["status"] == "fail" and f"role {role!r}" in check["detail"]
        assert "records (INSERT, UPDATE, DELETE)" in check["detail"], check
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# -- long-running commands, as real processes --------------------------------------------------------
def _env(keyring: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["CENOTAPH_KEYRING"] = str(keyring)
    return env


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def test_serve_on_postgres_authenticates_the_keys_beside_the_keyring(store_url: str, keyring: Path) -> None:
    made = ok("api-keys", "create", "--tenant", "acme", "--prefix", USER, "--data", store_url)
    process = subprocess.Popen(
        [*CLI, "serve", "--data", store_url, "--port", "0", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(keyring),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, process.communicate(timeout=30)[1]
        base = json.loads(line)["listening"]
        auth = {"Authorization": f"Bearer {made['key']}"}
        body = {"scope": USER, "key": "k", "value": 1}
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.post(base + "/v1/memories", json=body, headers=auth, timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.05)
        assert response.status_code == 201, response.text
        assert httpx.post(base + "/v1/memories", json=body, timeout=5).status_code == 401
        assert _rows(store_url, "records") == 1  # the write reached the schema
    finally:
        _stop(process)


def test_mcp_over_http_on_postgres_requires_its_api_keys(store_url: str, keyring: Path) -> None:
    """A PostgreSQL store's MCP server with --api-keys refuses a request without a key (it once
    served everyone: the ring was looked for in a data directory it has not got)."""
    made = ok("api-keys", "create", "--tenant", "acme", "--prefix", USER, "--data", store_url)
    process = subprocess.Popen(
        [
            *CLI,
            "mcp",
            "--data",
            store_url,
            "--transport",
            "streamable-http",
            "--port",
            "0",
            "--api-keys",
            "--scope",
            USER,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(keyring),
    )
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 60
        served = ""
        while "serving http" not in served:
            served = process.stderr.readline()
            assert served or process.poll() is None, "cenotaph mcp exited"
            assert time.monotonic() < deadline, "cenotaph mcp did not start"
        address = served.split("serving ", 1)[1].split()[0]
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
        assert httpx.post(address, headers=headers, content=body, timeout=10).status_code == 401
        keyed = {**headers, "Authorization": f"Bearer {made['key']}"}
        assert httpx.post(address, headers=keyed, content=body, timeout=10).status_code != 401
    finally:
        _stop(process)


def test_audit_tree_head_and_witness_on_a_postgresql_url(store_url: str, pg_dsn: str, tmp_path: Path) -> None:
    state = str(tmp_path / "witness.json")
    first = ok("audit", "witness", state, "--data", store_url)
    ok("write", USER, "k", "v", "--data", store_url)
    ok("forget", USER, "k", "--data", store_url)
    second = ok("audit", "witness", state, "--data", store_url)
    assert second["old_size"] == first["new_size"] < second["new_size"]
    assert ok("audit", "tree-head", "--data", store_url)["tree_size"] == second["new_size"]
    audit = sql.Identifier(_schema_of(store_url), "audit")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # someone with the database rolls it back
        conn.execute(sql.SQL("DELETE FROM {} WHERE seq = (SELECT max(seq) FROM {})").format(audit, audit))
    result = run("audit", "witness", state, "--data", store_url)
    assert result.exit_code == 1
    size = second["new_size"]
    assert f"shrank from {size} entries (saved head) to {size - 1}" in " ".join(result.stderr.split())
