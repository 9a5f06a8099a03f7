"""`cenotaph serve` and `cenotaph api-keys` as real processes: keys made on the command line work at
once and stop working once revoked; SIGTERM lets in-flight requests finish and loses nothing it
acknowledged; the access log holds no names."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import cenotaph

CLI = [sys.executable, "-m", "cenotaph.cli.main"]
CANARY = "canary-4b7e-value"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


class Server:
    def __init__(self, data: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [*CLI, "serve", "--data", str(data), "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
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
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


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
