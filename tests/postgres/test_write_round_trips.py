"""A write on PostgreSQL is two round trips on the wire: BEGIN, its locks and the reads it needs
(the change marker, the counters, a block of versions, the slots' rows) in one, its inserts, the
change marker's bump and COMMIT in the other. Counted by ``bench/netdelay.py``'s relay between
the store and the server (no delay: it only counts), so a statement that comes back on its own
shows as a failure here, not only as a slower benchmark."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

import cenotaph
from cenotaph import LocalKeyring

RELAY = Path(__file__).resolve().parents[2] / "bench" / "netdelay.py"
SCOPE = "tenant:trips/user:alice"


class Relay:
    """The relay in its own process, and its control port."""

    def __init__(self, target: str) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(RELAY), "--target", target, "--delay-ms", "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        ports = json.loads(self._proc.stdout.readline())
        self.port = int(ports["listening"])
        self._control = socket.create_connection(("127.0.0.1", int(ports["control"])))
        self._file = self._control.makefile("rwb")

    def round_trips(self) -> int:
        """The round trips since the last call."""
        self._file.write(b"reset\n")
        self._file.flush()
        return int(json.loads(self._file.readline())["round_trips"])

    def close(self) -> None:
        self._file.close()
        self._control.close()
        self._proc.kill()
        self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


@pytest.fixture
def relayed(pg_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[tuple[cenotaph.Store, Relay]]:
    params = conninfo_to_dict(pg_dsn)
    relay = Relay(f"{params.get('host') or '127.0.0.1'}:{params.get('port') or 5432}")
    try:
        url = f"postgresql://{params.get('user', 'postgres')}@127.0.0.1:{relay.port}/{params['dbname']}"
        store = cenotaph.open(
            f"{url}?schema={pg_schema}", key_provider=LocalKeyring(tmp_path / "keyring"), auto_purge="off"
        )
        try:
            yield store, relay
        finally:
            store.close()
    finally:
        relay.close()


def test_a_write_transaction_is_two_round_trips(
    relayed: tuple[cenotaph.Store, Relay], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, relay = relayed
    store.write(SCOPE, "warm", "keys made and cached")  # the scope's and subject's keys exist now
    relay.round_trips()
    store.write(SCOPE, "diet", "vegetarian")
    whole = relay.round_trips()
    # nothing syncs before the write: the change marker is read in its first round trip
    monkeypatch.setattr(store._caches, "sync", lambda: pytest.fail("a complete sync before a quiet write"))
    relay.round_trips()
    store.write(SCOPE, "drink", "tea")  # a new slot
    new_slot = relay.round_trips()
    store.write(SCOPE, "drink", "coffee")  # the slot's row replaced
    replaced = relay.round_trips()
    store.write_many([{"scope": SCOPE, "key": f"k{i}", "value": i} for i in range(20)])
    batch = relay.round_trips()
    assert (whole, new_slot, replaced, batch) == (2, 2, 2, 2)
    drink, last = store.read(SCOPE, "drink"), store.read(SCOPE, "k19")
    assert drink is not None and drink.value == "coffee"
    assert last is not None and last.value == 19


def test_a_write_after_another_connection_committed_syncs_in_its_own_round_trips(
    relayed: tuple[cenotaph.Store, Relay], pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    store, relay = relayed
    store.write(SCOPE, "warm", "keys made and cached")
    cached = store.read(SCOPE, "warm")
    assert cached is not None and store._caches.resolved  # a resolved read held in memory
    other = cenotaph.open(
        f"{pg_dsn}?schema={pg_schema}" if "?" not in pg_dsn else f"{pg_dsn}&schema={pg_schema}",
        key_provider=LocalKeyring(tmp_path / "keyring"),
        auto_purge="off",
    )
    try:
        other.write(SCOPE, "warm", "changed by another connection")
    finally:
        other.close()
    relay.round_trips()
    store.write(SCOPE, "after", "a write that finds the change")
    assert relay.round_trips() == 2
    assert not store._caches.resolved  # the change was acted on inside the write
    assert store._caches.quiet()  # and memory is as fresh as a complete sync would leave it
    relay.round_trips()
    store.write(SCOPE, "later", "nothing changed since")
    assert relay.round_trips() == 2
    seen = store.read(SCOPE, "warm")
    assert seen is not None and seen.value == "changed by another connection"
