"""Scenarios of the PostgreSQL process tests, run in child processes by ``tests.kit.proc``
(registered in ``tests.kit.scenarios.SCENARIOS``).

Each opens its own store on one schema of the shared server (one OS process, one ``Store``, as
an app server would), prints lines with ``say`` and returns a JSON-able value. Nothing here
asserts: the tests do.

- ``pg-race-forgetter`` / ``pg-race-writer`` (test_races_processes.py): a forgetter publishes the
  trial it is about to forget in a shared progress file; writers keep writing whatever trial each
  forgetter has published, so writes are in flight while the forget commits.
- ``pg-forget-subject``, ``pg-reader``, ``pg-finish`` (test_server_killed.py): an app server that
  forgets a subject (and is SIGKILLed at a fault point), a reader that serves reads all along, and
  a second server that finishes the erasure.
"""

from __future__ import annotations

import json
import mmap
import random
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.kit.scenarios import say

import cenotaph
from cenotaph import LocalKeyring
from cenotaph.errors import ForgottenError, StaleWriteError

TRIAL_KEY = "fact"
# what a trial's forget names: its key in the session's subtree (alone or with its ancestors:
# target locks on PostgreSQL), the whole session scope or the trial's subject (store-wide)
FORGET_KINDS = ("key", "ancestors", "scope", "subject")
IDLE = -1  # a forgetter's slot before its first trial
DONE = -2  # ... after its last
SLOT = struct.Struct("<q")
GO_WAIT_S = 120


def now_ns() -> int:
    """CLOCK_MONOTONIC: one clock for every process of this machine."""
    return time.monotonic_ns()


def open_store(dsn: str, schema: str, keyring: str, auto_purge: str = "off") -> cenotaph.Store:
    sep = "&" if "?" in dsn else "?"
    return cenotaph.open(
        f"{dsn}{sep}schema={schema}", key_provider=LocalKeyring(keyring), auto_purge=auto_purge
    )


def trial_scope(prefix: str, index: int) -> str:
    return f"{prefix}/session:t{index}"


def trial_subject(index: int) -> str:
    """The subject every write of a trial carries (a subject forget names it)."""
    return f"race-trial:{index}"


def forget_first(index: int) -> bool:
    """One trial in five is forgotten without waiting for a write (none written ahead): the
    forget may come before every write, racing the first ones."""
    return index % 5 == 4


def _wait_for_go(go: str) -> None:
    deadline = time.monotonic() + GO_WAIT_S
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go file")
        time.sleep(0.001)


class Progress:
    """Shared int64 cells in a file, two per slot: the trial its forgetter is on
    (``published``) and the last trial a writer's write of returned there (``landed``)."""

    def __init__(self, path: str) -> None:
        self._file = Path(path).open("r+b")  # noqa: SIM115 - lives as long as the process
        self._map = mmap.mmap(self._file.fileno(), 0)
        self._slots = len(self._map) // (2 * SLOT.size)

    @staticmethod
    def create(path: Path, slots: int) -> None:
        path.write_bytes(SLOT.pack(IDLE) * 2 * slots)

    def published(self, slot: int) -> int:
        return int(SLOT.unpack_from(self._map, slot * SLOT.size)[0])

    def publish(self, slot: int, value: int) -> None:
        SLOT.pack_into(self._map, slot * SLOT.size, value)

    def landed(self, slot: int) -> int:
        return int(SLOT.unpack_from(self._map, (self._slots + slot) * SLOT.size)[0])

    def land(self, slot: int, value: int) -> None:
        """``value`` landed in ``slot`` (kept if a later trial of the slot landed first)."""
        if value > self.landed(slot):
            SLOT.pack_into(self._map, (self._slots + slot) * SLOT.size, value)


# -- races --------------------------------------------------------------------------------------
def race_forgetter(
    dsn: str,
    schema: str,
    keyring: str,
    progress: str,
    go: str,
    first_slot: int,
    threads: int,
    prefix: str,
    trials: list[int],
    seed: int,
    auto_purge: str,
) -> dict[str, Any]:
    """``threads`` threads, thread ``t`` publishing its trials (``trials[t::threads]``) in slot
    ``first_slot + t``. For each trial: publish it, let the writers' first write land (or not:
    a random threshold), then compliance-forget it (one of ``FORGET_KINDS``)."""
    store = open_store(dsn, schema, keyring, auto_purge)
    shared = Progress(progress)
    say("ready")
    _wait_for_go(go)
    timeouts = [0] * threads

    def run(thread: int) -> list[dict[str, Any]]:
        slot = first_slot + thread
        out = []
        for index in trials[thread::threads]:
            rng = random.Random(f"{seed}/forget/{index}")
            scope = trial_scope(prefix, index)
            shared.publish(slot, index)
            if not forget_first(index):
                deadline = time.monotonic() + 2
                while shared.landed(slot) < index:
                    if time.monotonic() > deadline:
                        timeouts[thread] += 1
                        break
                    time.sleep(0.0005)
            time.sleep(rng.random() * 0.004)
            out.append(_forget(store, scope, index, rng.choice(FORGET_KINDS)))
        shared.publish(slot, DONE)
        return out

    with ThreadPoolExecutor(threads) as pool:
        forgets = [f for part in pool.map(run, range(threads)) for f in part]
    store.close()
    return {"forgets": forgets, "wait_timeouts": sum(timeouts)}


def _forget(store: cenotaph.Store, scope: str, index: int, target: str) -> dict[str, Any]:
    outcome: dict[str, Any] = {"trial": index, "target": target, "start": now_ns()}
    try:
        if target == "subject":
            request = store.forget_subject(trial_subject(index))
        else:
            key = None if target == "scope" else TRIAL_KEY
            request = store.forget(scope, key, include_ancestors=target == "ancestors")
    except Exception as exc:
        outcome.update(ok=False, error=type(exc).__name__, detail=str(exc)[:300])
    else:
        outcome.update(ok=True, version=request.version)
    outcome["end"] = now_ns()
    return outcome


def _attempt(
    store: cenotaph.Store, scope: str, index: int, name: str, n: int, rng: random.Random
) -> dict[str, Any]:
    """One write of the trial's key, carrying the trial's subject (half compare-and-set on what a
    read just saw, a quarter into a child scope the write creates); never raises."""
    target = scope if rng.random() < 0.75 else f"{scope}/turn:{name}"
    out: dict[str, Any] = {"slot": target, "w": name, "n": n, "start": now_ns()}
    try:
        base = None
        if rng.random() < 0.5:
            out["read_start"] = now_ns()
            seen = store.read(target, TRIAL_KEY, fallthrough=False)
            out["read_found"] = seen is not None
            base = None if seen is None else seen.version
        record = store.write(
            target, TRIAL_KEY, {"w": name, "n": n}, subjects=[trial_subject(index)], base_version=base
        )
    except ForgottenError as exc:
        out.update(ok=False, error="ForgottenError", error_version=exc.version)
    except StaleWriteError:
        out.update(ok=False, error="StaleWriteError")
    except Exception as exc:
        out.update(ok=False, error=type(exc).__name__, detail=str(exc)[:300])
    else:
        out.update(ok=True, version=record.version)
    out["end"] = now_ns()
    return out


def _late_read(store: cenotaph.Store, scope: str, index: int) -> dict[str, Any]:
    """A read of a trial whose forget has returned (its forgetter moved on)."""
    out: dict[str, Any] = {"trial": index, "kind": "read", "slot": scope, "start": now_ns()}
    out["read_start"] = out["start"]
    out["read_found"] = store.read(scope, TRIAL_KEY, fallthrough=False) is not None
    out["end"] = now_ns()
    return out


def race_writer(
    dsn: str,
    schema: str,
    keyring: str,
    progress: str,
    go: str,
    name: str,
    slots: int,
    trials: int,
    prefix: str,
    attempts: int,
    seed: int,
    prewrite: bool,
) -> dict[str, Any]:
    """Write every trial published in a slot, up to ``attempts`` times (until one is refused),
    until every slot is done; a thread per slot. A slot's trials are ``slot, slot + slots, ...``;
    with ``prewrite``, while the forgetter forgets one, this writer writes its next once, so
    that forget can start at once (the threads' writes share transactions: group commit)."""
    store = open_store(dsn, schema, keyring)
    shared = Progress(progress)
    say("ready")
    _wait_for_go(go)

    def write(slot: int, index: int, done: dict[int, int], out: list[dict[str, Any]]) -> None:
        n = done.get(index, 0)
        outcome = _attempt(
            store, trial_scope(prefix, index), index, name, n, random.Random(f"{seed}/{name}/{index}/{n}")
        )
        outcome["trial"] = index
        out.append(outcome)
        if outcome["ok"]:
            shared.land(slot, index)
        # once refused, this writer is done with the trial: the next ones would be too
        done[index] = attempts if outcome.get("error") == "ForgottenError" else n + 1

    def run(slot: int) -> list[dict[str, Any]]:
        done: dict[int, int] = {}
        last = IDLE
        out: list[dict[str, Any]] = []
        while (index := shared.published(slot)) != DONE:
            if last >= 0 and index != last:  # its forget has returned: read it once more
                out.append(_late_read(store, trial_scope(prefix, last), last))
            last = index
            following = index + slots if index >= 0 else slot
            if index >= 0 and done.get(index, 0) < attempts:
                write(slot, index, done, out)
            elif prewrite and following < trials and following not in done and not forget_first(following):
                write(slot, following, done, out)
            else:
                time.sleep(0.001)
        if last >= 0:
            out.append(_late_read(store, trial_scope(prefix, last), last))
        return out

    with ThreadPoolExecutor(slots) as pool:
        writes = [w for part in pool.map(run, range(slots)) for w in part]
    store.close()
    return {"writes": writes}


# -- a server killed mid-forget -----------------------------------------------------------------
def forget_subject(dsn: str, schema: str, keyring: str, subject: str, chunk: int) -> dict[str, Any]:
    """Compliance-forget ``subject`` applying ``chunk`` records a transaction, then purge.
    Prints ``forgetting T``, ``returned ID STATE T``, ``purged T`` (T: now_ns) as each happens."""
    from cenotaph.ledger import journal as ledger

    ledger.CHUNK_RECORDS = chunk
    store = open_store(dsn, schema, keyring, "off")
    say("opened")
    say(f"forgetting {now_ns()}")
    request = store.forget_subject(subject)
    say(f"returned {request.id} {request.status().state} {now_ns()}")
    store.purge()
    say(f"purged {now_ns()}")
    store.close()
    return {"request_id": request.id}


def reader(dsn: str, schema: str, keyring: str, keys: list[list[str]], stop: str, ask: str) -> dict[str, Any]:
    """Read every ``[label, scope, key]`` in turn until the ``stop`` file exists; each read as
    ``[label, start, end, found, error]``. When the ``ask`` file holds a number not answered yet,
    the next round that starts says ``round N`` once it has read every key."""
    store = open_store(dsn, schema, keyring)
    say("ready")
    reads: list[list[Any]] = []
    answered = 0
    while not Path(stop).exists():
        try:
            asked = int(Path(ask).read_text())
        except FileNotFoundError:
            asked = 0
        for label, scope, key in keys:
            start = now_ns()
            try:
                found = store.read(scope, key) is not None
                error = None
            except Exception as exc:
                found, error = False, type(exc).__name__
            reads.append([label, start, now_ns(), found, error])
        if asked > answered:
            say(f"round {asked}")
            answered = asked
        time.sleep(0.002)  # pacing: a round every few ms is plenty
    store.close()
    return {"reads": reads}


def finish(
    dsn: str, schema: str, keyring: str, subject: str, gone: list[list[str]], kept: list[list[str]]
) -> dict[str, Any]:
    """Open the store (which resumes a forget cut short), wait for every request to verify and
    report what each read of ``gone`` and ``kept`` (``[scope, key]``) found."""
    store = open_store(dsn, schema, keyring)
    states_at_open = {r.id: r.status().state for r in store.erasures()}
    verified = {}
    for request in store.erasures():
        status = request.wait(timeout=150)
        verified[request.id] = status.state
        if status.state == "verified":
            store.confirm_erasure(request.id)
            cenotaph.verify_certificate(store.attest(request.id).to_json(), store.public_key)
    try:
        store.write(gone[0][0], "after", "a new fact about them")
        refused = None
    except ForgottenError as exc:
        refused = type(exc).__name__
    result = {
        "states_at_open": states_at_open,
        "states": verified,
        "gone_found": sum(store.read(s, k) is not None for s, k in gone),
        "gone_listed": len(store.list(gone[0][0].rsplit("/", 1)[0], include_descendants=True)),
        "kept_found": sum(store.read(s, k) is not None for s, k in kept),
        "write_refused": refused,
        "exported": len(json.dumps(store.export_subject(subject)).encode()),
    }
    store.close()
    return result
