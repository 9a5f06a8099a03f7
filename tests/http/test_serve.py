"""`cenotaph serve` and `cenotaph api-keys` as real processes: keys made on the command line work at
once and stop working once revoked; a forget goes on to verified with nobody calling purge (the
server runs the store's background worker), and the README's remote-client snippet runs as
written; SIGTERM or Ctrl-C stops accepting, lets in-flight requests finish, loses nothing it
acknowledged, closes the store cleanly and exits 0; the access log holds no names."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

import cenotaph

CLI = [sys.executable, "-m", "cenotaph.cli.main"]
CANARY = "canary-4b7e-value"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


README = Path(__file__).resolve().parents[2] / "README.md"


class Server:
    def __init__(self, data: Path, *extra: str, env: Mapping[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*CLI, "serve", "--data", str(data), "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read() if self.proc.stderr else "no output"
        self.url = json.loads(line)["listening"]
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.05)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def wait(self) -> tuple[int, str]:
        """Its exit status and what it wrote on stderr, once it has exited."""
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err

    def listening(self) -> bool:
        parts = urlsplit(self.url)
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=2):
                return True
        except OSError:
            return False


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    assert _cli("init", "--data", str(directory)).returncode == 0
    return directory


@pytest.fixture
def server(data: Path) -> Iterator[Server]:
    s = Server(data)
    try:
        yield s
    finally:
        if s.proc.poll() is None:
            s.stop()


def _create(data: Path, *args: str) -> dict[str, str]:
    result = _cli("api-keys", "create", "--data", str(data), *args)
    assert result.returncode == 0, result.stderr
    doc: dict[str, str] = json.loads(result.stdout)
    return doc


def test_keys_from_the_command_line_work_until_revoked(data: Path, server: Server) -> None:
    made = _create(data, "--tenant", "acme", "--prefix", "tenant:acme/user:alice", "--role", "agent")
    assert made["id"].startswith("ak_") and made["key"].startswith("cnk_") and made["role"] == "agent"
    listed = _cli("api-keys", "list", "--data", str(data))
    assert made["id"] in listed.stdout and made["key"] not in listed.stdout
    h = {"Authorization": f"Bearer {made['key']}"}
    r = httpx.post(
        server.url + "/v1/memories",
        json={"scope": "tenant:acme/user:alice", "key": "k", "value": 1},
        headers=h,
    )
    assert r.status_code == 201
    assert _cli("api-keys", "revoke", made["id"], "--data", str(data)).returncode == 0
    r = httpx.get(
        server.url + "/v1/memories", params={"scope": "tenant:acme/user:alice", "key": "k"}, headers=h
    )
    assert r.status_code == 401  # the very next request


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--tenant", "acme", "--prefix", "tenant:globex", "--role", "agent"], "inside tenant:acme"),
        (["--tenant", "acme", "--role", "admin"], "admin"),
        (["--tenant", "a/b"], "tenant"),
    ],
)
def test_bad_key_options_exit_2_with_one_line(data: Path, args: list[str], reason: str) -> None:
    result = _cli("api-keys", "create", "--data", str(data), *args)
    assert result.returncode == 2 and reason in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_serve_and_api_keys_need_an_existing_store(tmp_path: Path) -> None:
    for args in (
        ["serve", "--data", str(tmp_path / "nope")],
        ["api-keys", "list", "--data", str(tmp_path / "nope")],
    ):
        result = _cli(*args)
        assert result.returncode == 2 and "cenotaph init" in result.stderr
    assert not (tmp_path / "nope").exists()


def test_a_busy_port_is_bad_input(data: Path, server: Server) -> None:
    port = server.url.rsplit(":", 1)[1]
    result = _cli("serve", "--data", str(data), "--port", port)
    assert result.returncode == 2 and "cannot listen" in result.stderr


def test_sigterm_finishes_in_flight_requests_and_loses_nothing_acknowledged(data: Path) -> None:
    secret = _create(data, "--tenant", "acme", "--role", "operator")["key"]
    server = Server(data)
    h = {"Authorization": f"Bearer {secret}"}
    acknowledged: list[tuple[str, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        with httpx.Client(base_url=server.url, headers=h, timeout=30) as http:
            for i in range(10_000):
                if stop.is_set():
                    return
                key = f"w{n}-{i}"
                try:
                    r = http.post(
                        "/v1/memories", json={"scope": "tenant:acme/user:alice", "key": key, "value": CANARY}
                    )
                except httpx.TransportError:
                    return  # the server is gone: this write was never acknowledged
                if r.status_code == 201:
                    with lock:
                        acknowledged.append((key, r.json()["version"]))
                else:
                    return

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 60 and time.monotonic() < deadline:
        time.sleep(0.02)
    code, log = server.stop()  # SIGTERM while the writers are busy
    stop.set()
    for t in threads:
        t.join(60)
    assert code == 0, log
    assert "Traceback" not in log
    assert len(acknowledged) >= 60
    with cenotaph.open(data) as store:
        missing = [
            k
            for k, v in acknowledged
            if (rec := store.read("tenant:acme/user:alice", k)) is None or rec.version != v
        ]
    assert missing == [], f"{len(missing)} acknowledged writes lost"
    for needle in (CANARY, "alice", "w0-", secret):
        assert needle not in log  # the access log and uvicorn's own lines hold no names


def test_sigterm_waits_for_the_purge_under_way(data: Path) -> None:
    secret = _create(data, "--tenant", "acme", "--role", "operator")["key"]
    server = Server(data)
    h = {"Authorization": f"Bearer {secret}"}
    httpx.post(
        server.url + "/v1/memories",
        json={"scope": "tenant:acme/user:alice", "key": "k", "value": CANARY},
        headers=h,
    )
    r = httpx.post(server.url + "/v1/forget", json={"scope": "tenant:acme/user:alice", "key": "k"}, headers=h)
    assert r.status_code == 202
    code, _ = server.stop()
    assert code == 0
    with cenotaph.open(data) as store:  # a forget acknowledged is durable; the purge resumes if cut
        assert store.read("tenant:acme/user:alice", "k") is None
        assert store.erasure(r.json()["request_id"]).wait(30).state == "verified"


def _until_verified(http: httpx.Client, request_id: str, timeout: float = 90) -> dict[str, Any]:
    """GET /v1/erasures/{id} (which never purges) until the request is verified; its status."""
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = http.get(f"/v1/erasures/{request_id}").json()["status"]
        if status["state"] == "verified":
            return status
        assert time.monotonic() < deadline, f"not verified within {timeout} s: {status.get('gaps')}"
        time.sleep(0.05)


def test_a_forget_verifies_with_nobody_calling_purge(data: Path, server: Server) -> None:
    secret = _create(data, "--tenant", "acme", "--prefix", "tenant:acme/user:alice", "--role", "agent")["key"]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {secret}"}, timeout=30) as http:
        body = {"scope": "tenant:acme/user:alice", "key": "k", "value": CANARY}
        assert http.post("/v1/memories", json=body).status_code == 201
        forgotten = http.post("/v1/forget", json={"scope": "tenant:acme/user:alice", "key": "k"})
        assert forgotten.status_code == 202
        status = _until_verified(http, forgotten.json()["request_id"])
    assert status["gaps"] == []
    code, _ = server.stop()
    assert code == 0
    assert not [p for p in data.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]


def _readme_client_snippet() -> str:
    """The README's Python block that uses cenotaph.Client against a running server."""
    section = README.read_text().split("### An HTTP server, its remote client and the operator console", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section.split("\n### ", 1)[0], re.DOTALL)
    (snippet,) = [b for b in blocks if "cenotaph.Client(" in b]
    return str(snippet)


def test_the_readme_client_snippet_runs_as_written(data: Path, server: Server) -> None:
    """Its key made as the README makes it; only the address is this server's free port."""
    key = _create(data, "--tenant", "acme", "--prefix", "tenant:acme/user:alice", "--role", "agent")["key"]
    snippet = _readme_client_snippet()
    assert snippet.count("http://127.0.0.1:8000") == 1
    result = subprocess.run(
        [sys.executable, "-c", snippet.replace("http://127.0.0.1:8000", server.url)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KEY": key},
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_lets_the_request_in_flight_finish_and_closes_the_store(
    data: Path, tmp_path: Path, signum: int
) -> None:
    """The forget is held at a pause point inside the store when the signal comes: the server
    stops accepting connections, then answers it, closes the store and exits 0. A clean close
    leaves no write-ahead log (a killed process leaves it, for the next open to recover)."""
    secret = _create(data, "--tenant", "acme", "--role", "operator")["key"]
    with cenotaph.open(data, auto_purge="off") as store:
        store.write("tenant:acme/user:alice", "k", CANARY)
    marker = tmp_path / "forgetting"
    server = Server(data, env={"CENOTAPH_PAUSE": f"forget.planned:{marker}"})
    answered: list[httpx.Response] = []

    def forget() -> None:
        body = {"scope": "tenant:acme/user:alice", "key": "k"}
        headers = {"Authorization": f"Bearer {secret}"}
        answered.append(httpx.post(server.url + "/v1/forget", json=body, headers=headers, timeout=60))

    in_flight = threading.Thread(target=forget)
    in_flight.start()
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline and in_flight.is_alive(), "the forget never reached the store"
            time.sleep(0.02)
        server.proc.send_signal(signum)
        while server.listening():
            assert time.monotonic() < deadline, "still accepting connections after the signal"
            time.sleep(0.05)
        marker.unlink()
        in_flight.join(60)
        code, log = server.wait()
    finally:
        marker.unlink(missing_ok=True)
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()
    assert answered and answered[0].status_code == 202, answered
    assert code == 0 and "Traceback" not in log, log
    left = sorted(p.name for p in data.iterdir() if p.name.endswith(("-wal", "-shm", "-journal")))
    assert left == [], f"the store was not closed cleanly: {left}"
    with cenotaph.open(data) as store:
        store.verify_audit()  # the anchors were flushed on close: the chain matches them
        assert store.read("tenant:acme/user:alice", "k") is None
        assert store.erasure(answered[0].json()["request_id"]).wait(60).state == "verified"


def test_the_console_can_be_left_out(data: Path) -> None:
    server = Server(data, "--no-console", "--quiet")
    try:
        assert httpx.get(server.url + "/console/login").status_code == 404
        assert httpx.get(server.url + "/v1/health").status_code == 200
    finally:
        code, log = server.stop()
    assert code == 0 and "cenotaph.http.access" not in log


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")


def test_re_forgetting_an_operators_forget_does_not_let_an_agent_rewrite_it(
    data: Path, server: Server
) -> None:
    """The re-forget attack against a real ``cenotaph serve``: an operator forgets a key, an
    agent key forgets the same key again, then asks for a reauthorization token. The operator's
    forget still blocks and is not the agent's to lift: 403, no token, and the write stays
    refused. The agent's own forget of another key is still its own to lift (201, then 201)."""
    scope = "tenant:acme/user:alice"
    agent = _create(data, "--tenant", "acme", "--prefix", scope, "--role", "agent")["key"]
    operator = _create(data, "--tenant", "acme", "--role", "operator")["key"]

    def call(secret: str, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            server.url + path, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=30
        )

    for key in ("diet", "mine"):
        assert call(agent, "/v1/memories", {"scope": scope, "key": key, "value": "v1"}).status_code == 201
    assert (
        call(operator, "/v1/forget", {"scope": scope, "key": "diet", "mode": "operational"}).status_code
        == 202
    )
    assert (
        call(agent, "/v1/forget", {"scope": scope, "key": "diet", "mode": "operational"}).status_code == 202
    )
    refused = call(agent, "/v1/reauthorizations", {"scope": scope, "key": "diet"})
    assert refused.status_code == 403, refused.text
    assert "token" not in refused.json()
    rewrite = call(agent, "/v1/memories", {"scope": scope, "key": "diet", "value": "resurrected"})
    assert rewrite.status_code == 409, rewrite.text

    assert (
        call(agent, "/v1/forget", {"scope": scope, "key": "mine", "mode": "operational"}).status_code == 202
    )
    granted = call(agent, "/v1/reauthorizations", {"scope": scope, "key": "mine"})
    assert granted.status_code == 201, granted.text
    body = {"scope": scope, "key": "mine", "value": "v2", "reauthorization": granted.json()["token"]}
    assert call(agent, "/v1/memories", body).status_code == 201
    assert server.stop()[0] == 0
    with cenotaph.open(data) as store:
        assert store.read(scope, "diet") is None
        record = store.read(scope, "mine")
        assert record is not None and record.value == "v2"
