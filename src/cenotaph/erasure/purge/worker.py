"""The erasure worker: one thread per store that finishes large forgets and purges in the
background, coalesced -- however many forgets ask while a pass runs, one more pass covers them
all (one residue scan for many requests).

A compliance forget returns once its tombstone and key destruction are durable (``shredded``)
and *nudges* the worker; ``ErasureRequest.wait()`` nudges it and waits for a pass that started
after the nudge. A pass is whatever the store gives it (finish chunked forgets, then purge);
when it leaves work that time may finish (an open reader blocks WAL truncation) the worker
tries again after a growing pause, and otherwise sleeps until nudged. A pass that fails is
logged (its class only), handed to every waiter of that pass, never swallowed, and retried the
same way -- five failures in a row (a read-only data directory, say) and it waits to be nudged.
A run of failed passes nobody waited for is also kept for the store's next caller that can
observe it (:meth:`ErasureWorker.take_failure`): told once per run, a run ending at a pass that
succeeds.

``finish()`` (the store's ``close()``) runs one more pass at once when work may be left -- a
forget made just before closing -- and waits for it, for a bounded time. ``close()`` then stops
the worker at the next step boundary (a chunk, a scan's progress report): the pass is cut short
as a crash would cut it, and whatever it left is resumed by the next pass in any process --
every step of a forget and of a purge is resumable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ...errors import CenotaphError, InvalidValueError, KeyProviderError, StorageError

__all__ = ["CLOSE_PASS_S", "PURGE_MODES", "ErasureWorker", "Stopped", "failure_for_caller", "purge_mode"]

PURGE_MODES = ("background", "sync", "off")
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0
GATHER_S = 0.02  # a pass nobody waits for starts this long after its first nudge: a burst of
# forgets shares it, and the forgets are not slowed by a purge running beside them
FAILURES_BEFORE_WAITING = 5  # failed passes in a row, then retry only when nudged (a read-only store)
CLOSE_PASS_S = 5.0  # how long close() lets a last pass run: well inside a container's stop grace

_log = logging.getLogger("cenotaph")


def purge_mode(value: object) -> str:
    """``auto_purge`` as one of :data:`PURGE_MODES`, named: a boolean is refused (which of the
    two purging modes ``True`` would mean is not for the store to guess)."""
    if isinstance(value, str) and value in PURGE_MODES:
        return value
    named = "auto_purge takes a mode by name, not True or False: " if isinstance(value, bool) else ""
    raise InvalidValueError(
        f"{named}auto_purge must be 'background' (the default), 'sync' (purge inside every "
        "compliance forget) or 'off' (purge yourself with store.purge())"
    )


def failure_for_caller(error: BaseException) -> CenotaphError:
    """What a caller who did not wait for it is told of a failed background pass: the error's
    class (a key provider's failure stays a :class:`KeyProviderError`, anything else is a
    :class:`StorageError`), what it means, and what to do; raised ``from`` the original."""
    detail = str(error) if isinstance(error, CenotaphError) else type(error).__name__
    kind = KeyProviderError if isinstance(error, KeyProviderError) else StorageError
    failure = kind(
        f"a background purge failed ({detail}): the erasures it was finishing are in effect (their "
        "data is unreadable) but not yet purged and verified. Fix the cause, then run store.purge() "
        "to finish them now (the worker also retries at the next forget); store.erasure(request_id) "
        "reports each request's state"
    )
    failure.__cause__ = error
    return failure


class Stopped(Exception):
    """Raised inside a pass when its worker is closing: the pass ends as a crash would end it."""


# (check_stop, thorough) -> whether a retry may finish what is left; ``thorough``: some waiter
# asked, so requests stuck on something a person must fix are tried again too
Pass = Callable[[Callable[[], None], bool], bool]


class ErasureWorker:
    def __init__(self, run_pass: Pass, name: str = "cenotaph-erasure") -> None:
        self._run_pass = run_pass
        self._name = name
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wanted = False
        self._thorough = False
        self._closing = False
        self._started = 0  # passes begun
        self._completed = 0  # passes ended (successfully or not)
        self._errors: dict[int, BaseException] = {}  # pass number -> what it raised (recent only)
        self._idle = True  # the last pass left nothing to retry, and no nudge came since
        self._hurry = False  # the next pass starts at once (close is waiting for it)
        self._failure: BaseException | None = None  # the newest error of the current run of failures
        self._failure_told = False  # some caller has been given this run's failure

    def nudge(self, *, thorough: bool = False) -> int:
        """Ask for a pass (``thorough``: one that also retries stuck requests); returns the
        number of the first pass that covers this request (one that starts after now: a pass
        already running may have read the store before it)."""
        with self._cond:
            if self._closing:
                return self._started + 1
            self._wanted = True
            self._idle = False
            self._thorough = self._thorough or thorough
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return self._started + 1

    def wake(self) -> None:
        """:meth:`nudge`, for callers that need no ticket."""
        self.nudge()

    def wait_for(self, ticket: int, timeout: float | None) -> BaseException | None:
        """Wait until pass ``ticket`` (or a later one) ended; returns what it raised, if it did.
        Returns at once if the worker is closed or ``timeout`` passes first."""
        with self._cond:
            self._cond.wait_for(lambda: self._completed >= ticket or self._closing, timeout)
            error = self._errors.get(self._completed) if self._completed >= ticket else None
            if error is not None and error is self._failure:
                self._failure_told = True  # the waiter raises it: nobody else needs telling
            return error

    def wait_until_ended(self, number: int, timeout: float) -> bool:
        """Wait until pass ``number`` (a :meth:`nudge`'s ticket) or a later one has ended, for
        at most ``timeout`` seconds; whether it has. Returns at once if the worker is closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._completed >= number or self._closing, timeout)
            return self._completed >= number

    @property
    def passes_ended(self) -> int:
        """How many passes have ended, successfully or not: the ticket of the newest."""
        with self._cond:
            return self._completed

    def take_failure(self) -> BaseException | None:
        """The newest error of the current run of failed passes, if no caller has been given it
        (a waiter, or an earlier call of this); after that, None until a pass succeeds and a
        later one fails again."""
        with self._cond:
            if self._failure is None or self._failure_told:
                return None
            self._failure_told = True
            return self._failure

    def finish(self, timeout: float) -> None:
        """Before :meth:`close`: if work may be left (a nudge not served yet, a pass running, a
        retry due), have one more pass cover it, starting now, and wait for it -- at most
        ``timeout`` seconds; a pass still running then is cut short by :meth:`close`."""
        with self._cond:
            if self._thread is None or self._closing or self._idle:
                return
            running = self._started > self._completed
            if self._wanted or not running:
                self._wanted = self._hurry = True
                self._cond.notify_all()
            ticket = self._started + 1 if self._wanted else self._started
            self._cond.wait_for(lambda: self._completed >= ticket, timeout)

    @property
    def running(self) -> bool:
        with self._cond:
            return self._thread is not None and not self._closing

    def close(self) -> None:
        """Stop at the next step boundary and wait for the thread to end."""
        with self._cond:
            self._closing = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _check_stop(self) -> None:
        if self._closing:
            raise Stopped()

    def _loop(self) -> None:
        delay: float | None = None  # None: sleep until nudged
        failures = 0
        while True:
            with self._cond:
                if not self._wanted and not self._closing:
                    self._cond.wait(delay)
                if self._wanted and not (self._thorough or self._hurry or self._closing):
                    self._cond.wait_for(lambda: self._thorough or self._hurry or self._closing, GATHER_S)
                if self._closing:
                    return
                self._wanted = self._hurry = False
                thorough, self._thorough = self._thorough, False
                self._started += 1
                number = self._started
            error: BaseException | None = None
            retry = False
            try:
                retry = self._run_pass(self._check_stop, thorough)
            except Stopped:
                return
            except Exception as exc:  # noqa: BLE001 - handed to this pass's waiters below, and logged
                error, retry = exc, True
                if type(exc) is not type(self._errors.get(number - 1)):  # once per run of failures
                    _log.warning("background erasure pass failed (%s); retrying", type(exc).__name__)
            failures = failures + 1 if error is not None else 0
            if failures >= FAILURES_BEFORE_WAITING:
                retry = False
            delay = (RETRY_FIRST_S if delay is None else min(delay * 2, RETRY_MAX_S)) if retry else None
            with self._cond:
                self._completed = number
                self._record(number, error)
                self._idle = not retry and not self._wanted
                self._cond.notify_all()

    def _record(self, number: int, error: BaseException | None) -> None:
        """Keep what pass ``number`` raised for its waiters, and for the next caller if it starts
        a run of failures (under the lock)."""
        if error is None:
            self._failure, self._failure_told = None, False
        else:
            self._errors[number] = error
            self._failure = error
        for old in [n for n in self._errors if n < number - 16]:
            del self._errors[old]
