"""Crash scenarios: children that are SIGKILLed by the parent at a moment it picks, or that kill
themselves at a fault point (``CENOTAPH_FAULT``, cenotaph.faults) or a patched step.

Each prints what returned, one whole line at a time (:func:`tests.kit.scenarios.say`), so the
parent knows exactly which calls returned before the kill.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any

from tests.kit.scenarios import say

import cenotaph
from cenotaph.ledger import journal as ledger


def crash_writer(directory: str, prefix: str, seed: int, auto_purge: str) -> None:
    """Write (single and batched, two threads) and forget until killed; print what returned.

    Lines: ``w SCOPE KEY VERSION VALUE`` after a write returned, ``f SCOPE KEY VERSION`` after a
    forget returned, ``F SCOPE KEY`` just before a forget is called (it may or may not happen).
    """
    store = cenotaph.open(directory, auto_purge=auto_purge)
    say("ready")
    scope = f"{prefix}/user:u/session:s"

    def singles() -> None:
        rng = random.Random(f"{seed}/a")
        i = 0
        while True:
            key = f"a{i}"
            value = rng.randrange(1 << 30)
            record = store.write(scope, key, value)
            say(f"w {scope} {key} {record.version} {value}")
            if i % 5 == 4:
                victim = f"a{i - 2}"
                say(f"F {scope} {victim}")
                request = store.forget(scope, victim, mode=rng.choice(("compliance", "operational")))
                say(f"f {scope} {victim} {request.version}")
            i += 1

    def batches() -> None:
        rng = random.Random(f"{seed}/b")
        i = 0
        while True:
            items = [{"scope": scope, "key": f"b{i}_{j}", "value": rng.randrange(1 << 30)} for j in range(3)]
            records = store.write_many(items)
            for item, record in zip(items, records, strict=True):
                say(f"w {scope} {item['key']} {record.version} {item['value']}")
            i += 1

    for fn in (singles, batches):
        threading.Thread(target=fn, daemon=True).start()
    time.sleep(120)  # the parent kills us long before this


def crash_after_forget(directory: str, scope: str, mode: str) -> None:
    """Forget, reauthorize, print what returned, then wait to be killed."""
    store = cenotaph.open(directory)
    store.write(scope, "gone", "secret")
    store.write(scope, "again", "first")
    store.write(scope, "kept", "stays")
    request = store.forget(scope, "gone", mode=mode)
    say(f"forgot {request.id} {request.version}")
    second = store.forget(scope, "again", mode=mode)
    token = store.reauthorize(scope, "again")
    say(f"token {second.version} {token}")
    say("returned")
    time.sleep(120)


def crash_in_forget(directory: str, scope: str, key: str | None, mode: str, when: str) -> None:
    """Forget and SIGKILL ourselves mid-forget.

    ``when == "after-ledger"``: after the ledger entry is fsynced in the key provider, before the
    database transaction commits (W7: the forget must be applied on the next open).
    ``when == "before-ledger"``: before anything reaches the ledger (the forget must not happen).
    """
    from cenotaph.crypto.provider import LocalKeyring
    from cenotaph.ledger.journal import Ledger
    from cenotaph.ledger.plan import ForgetPlan

    if when == "after-ledger":
        original = Ledger.commit_plan

        def commit_then_die(self: Ledger, *args: Any, **kwargs: Any) -> bool:
            whole = original(self, *args, **kwargs)
            plan = next(a for a in (*args, *kwargs.values()) if isinstance(a, ForgetPlan))
            say(f"plan {plan.request_id} {plan.version}")
            os.kill(os.getpid(), signal.SIGKILL)
            return whole  # never reached

        Ledger.commit_plan = commit_then_die  # type: ignore[method-assign]
    elif when == "before-ledger":
        append = LocalKeyring.append_ledger

        def die_on_forget(self: LocalKeyring, entry: Any) -> None:
            if entry.get("kind") != "forget":  # other entries (audit anchors, ...) pass through
                append(self, entry)
                return
            say(f"plan {entry['request_id']} {entry['plan']['version']}")
            os.kill(os.getpid(), signal.SIGKILL)

        LocalKeyring.append_ledger = die_on_forget  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown when={when!r}")
    store = cenotaph.open(directory)
    say("opened")
    store.forget(scope, key, mode=mode)
    say("returned")  # never reached


ERASURE_SUBJECT = "tenant:t/user:a"
ERASURE_MODES = {"auto": "sync", "explicit": "off", "chunked": "off", "background": "background"}


def erasure_forget(data: str, mode: str, target: str = "subject") -> None:
    """Compliance-forget subject tenant:t/user:a of the store in ``data`` (``target="scope"``:
    that scope's subtree instead), under whatever fault point the parent set.

    ``mode`` ``auto``: ``auto_purge="sync"`` (the forget purges before it returns); prints
    ``returned ID STATE`` if the forget returned. ``explicit``: ``auto_purge="off"``; prints
    ``returned ID STATE`` after the forget, then runs ``purge()`` and prints ``purged`` if that
    returned. ``chunked``: like ``explicit``, with forgets chunked 3 records at a time (so a
    forget of more than 3 records commits its head first and its records in chunks, and a purge
    removes rows one record per transaction). ``background``: the default store (the purge runs
    in its worker thread); prints ``returned ID STATE``, then waits for the request and prints
    ``verified``. Prints ``opened`` first.
    """
    if mode == "chunked":
        ledger.CHUNK_RECORDS = 3
    store = cenotaph.open(data, auto_purge=ERASURE_MODES[mode])
    say("opened")
    request = store.forget_subject(ERASURE_SUBJECT) if target == "subject" else store.forget(ERASURE_SUBJECT)
    say(f"returned {request.id} {request.status().state}")
    if mode in ("explicit", "chunked"):
        store.purge()
        say("purged")
    elif mode == "background":
        request.wait(timeout=120)
        say("verified")
    store.close()


def restore(backup: str, target: str, keyring: str) -> None:
    """``cenotaph.restore`` of ``backup`` into ``target`` with the keyring at ``keyring``."""
    cenotaph.restore(backup, target, key_provider=cenotaph.LocalKeyring(keyring))


def group_writer(directory: str) -> None:
    """Six threads write single records and two write batches of three, until killed: the
    writes meet in group commits. Lines: ``ready``; ``w KEY VERSION`` once a write returned (a
    batch's lines in one write); ``g LARGEST`` every 10 ms, the largest group committed so far."""
    store = cenotaph.open(directory)
    scope = "tenant:crash/user:u/session:s"
    say("ready")

    def value(key: str) -> dict[str, str]:
        return {"key": key, "text": key * 8}

    def singles(t: int) -> None:
        i = 0
        while True:
            key = f"s{t}-{i}"
            record = store.write(scope, key, value(key))
            say(f"w {key} {record.version}")
            i += 1

    def batches(t: int) -> None:
        i = 0
        while True:
            keys = [f"b{t}-{i}-{j}" for j in range(3)]
            records = store.write_many([{"scope": scope, "key": k, "value": value(k)} for k in keys])
            say("\n".join(f"w {r.key} {r.version}" for r in records))
            i += 1

    def groups() -> None:
        while True:
            say(f"g {store._group.largest}")
            time.sleep(0.01)

    for t in range(6):
        threading.Thread(target=singles, args=(t,), daemon=True).start()
    for t in range(2):
        threading.Thread(target=batches, args=(t,), daemon=True).start()
    threading.Thread(target=groups, daemon=True).start()
    time.sleep(120)  # the parent kills us long before this
