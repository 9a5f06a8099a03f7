"""A model-based test of R1, R2, W1 and W2: random writes, reads, forgets (both modes, keys,
scopes, subjects, with and without ancestors), reauthorizations, compare-and-set writes and
restarts, checked step by step against a plain-dict model of what the guarantees (docs/guarantees.md) say must happen.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from tests.conformance._scopes import MODES, S1, T, U, V
from tests.kit.stores import StoreFactory

from cenotaph import Store
from cenotaph.errors import ForgottenError, ScopeClosureError, StaleWriteError

S = S1
SCOPES = (T, U, S, V)
KEYS = ("a", "b")
IDP = "idp:x"
SUBJECTS = (U, V, IDP)


def prefixes(scope: str) -> list[str]:
    parts = scope.split("/")
    return ["/".join(parts[: n + 1]) for n in range(len(parts))]


def within(scope: str, root: str) -> bool:
    return scope == root or scope.startswith(root + "/")


def default_subjects(scope: str) -> set[str]:
    return {p for p in prefixes(scope) if p.rsplit("/", 1)[-1].startswith("user:")}


@dataclass(frozen=True)
class Mark:
    """A tombstone, a lift or a token issue, ordered by when it happened (``seq``)."""

    seq: int
    version: int = 0


@dataclass
class Token:
    secret: str
    kind: str  # "scope" | "key"
    target: object  # scope | (scope, key)
    issued: int  # seq
    subject: str | None = None  # the subject it also lifts (reauthorize(..., subject=...))
    consumed: bool = False


@dataclass
class Model:
    data: dict[tuple[str, str], tuple[int, frozenset[str]]] = field(default_factory=dict)
    scope_ts: dict[str, Mark] = field(default_factory=dict)
    key_subtree: dict[tuple[str, str], Mark] = field(default_factory=dict)
    key_exact: dict[tuple[str, str], Mark] = field(default_factory=dict)
    subject_ts: dict[str, Mark] = field(default_factory=dict)
    lifts: dict[tuple[str, object], int] = field(default_factory=dict)

    # -- reads ------------------------------------------------------------------------------
    def read(self, scope: str, key: str, fallthrough: bool = True) -> tuple[str, int] | None:
        for p in reversed(prefixes(scope)) if fallthrough else [scope]:
            if (p, key) in self.data:
                return p, self.data[(p, key)][0]
        return None

    def listing(self) -> list[tuple[str, str, int]]:
        return sorted((s, k, v) for (s, k), (v, _) in self.data.items())

    # -- W1 ---------------------------------------------------------------------------------
    def covering(self, scope: str, key: str, subjects: set[str]) -> tuple[list[Mark], dict[str, Mark]]:
        general = [self.scope_ts[p] for p in prefixes(scope) if p in self.scope_ts]
        general += [self.key_subtree[(p, key)] for p in prefixes(scope) if (p, key) in self.key_subtree]
        if (scope, key) in self.key_exact:
            general.append(self.key_exact[(scope, key)])
        by_subject = {x: self.subject_ts[x] for x in subjects if x in self.subject_ts}
        return general, by_subject

    def decide(
        self, scope: str, key: str, subjects: set[str], token: Token | None
    ) -> tuple[str, Mark | None, list[tuple[str, object]]]:
        """('ok' | 'forgotten', the blocking tombstone, the lifts a consumed token records)."""
        general, by_subject = self.covering(scope, key, subjects)
        lifted = max(
            [self.lifts.get(("scope", p), -1) for p in prefixes(scope)]
            + [self.lifts.get(("key", (scope, key)), -1)]
        )
        blocked = [m for m in general if m.seq > lifted]
        blocked_subjects = {x: m for x, m in by_subject.items() if m.seq > self.lifts.get(("subject", x), -1)}
        if not blocked and not blocked_subjects:
            return "ok", None, []
        top = max([*blocked, *blocked_subjects.values()], key=lambda m: m.seq)
        if token is None or token.consumed:
            return "forgotten", top, []
        inside = token.target in prefixes(scope) if token.kind == "scope" else token.target == (scope, key)
        covers = inside and (not blocked_subjects or set(blocked_subjects) == {token.subject})
        if not covers or token.issued < top.seq:
            return "forgotten", top, []
        lifts: list[tuple[str, object]] = [(token.kind, token.target)] if blocked else []
        return "ok", None, lifts + ([("subject", token.subject)] if blocked_subjects else [])

    def newest_covering(self, scope: str, key: str, subjects: set[str]) -> Mark | None:
        general, by_subject = self.covering(scope, key, subjects)
        return max([*general, *by_subject.values()], key=lambda m: m.seq, default=None)


def make_machine(
    open_store: Callable[[], Store], reopen_store: Callable[[Store], Store]
) -> type[RuleBasedStateMachine]:
    class StoreMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store: Store = open_store()
            self.model = Model()
            self.tokens: list[Token] = []
            self.seq = itertools.count()
            self.values = itertools.count(1)
            self.last: tuple[str, str, bool] | None = None

        def teardown(self) -> None:
            self.store.close()

        # -- writes -------------------------------------------------------------------------
        def _write(
            self,
            scope: str,
            key: str,
            with_idp: bool,
            token: Token | None,
            base_version: int | None = None,
        ) -> None:
            value = next(self.values)
            subjects = default_subjects(scope) | ({IDP} if with_idp else set())
            outcome, top, lifts = self.model.decide(scope, key, subjects, token)
            kwargs: dict[str, object] = {"subjects": [IDP] if with_idp else None}
            if token is not None:
                kwargs["reauthorization"] = token.secret
            if base_version is not None:
                kwargs["base_version"] = base_version
            if outcome == "forgotten":
                with pytest.raises(ForgottenError) as info:
                    self.store.write(scope, key, value, **kwargs)  # type: ignore[arg-type]
                assert top is not None
                assert info.value.version == top.version
                return
            rec = self.store.write(scope, key, value, **kwargs)  # type: ignore[arg-type]
            assert (rec.scope, rec.key, rec.value) == (scope, key, value)
            assert set(rec.subjects) == subjects
            next(self.seq)  # the write takes a clock tick, as in the store
            if lifts:
                assert token is not None
                token.consumed = True
                # a lift reaches back to the token's issue, not its use (W1): a tombstone newer
                # than the token elsewhere in a scope token's subtree stays in force
                for lift in lifts:
                    self.model.lifts[lift] = max(self.model.lifts.get(lift, -1), token.issued)
            self.model.data[(scope, key)] = (value, frozenset(subjects))
            self.last = (scope, key, with_idp)

        # Writes are most of what an agent does: two rules (so they are drawn twice as often).
        # Any: unpacked into rule(), whose other keywords are not strategies
        write_args: ClassVar[dict[str, Any]] = {
            "scope": st.sampled_from(SCOPES),
            "key": st.sampled_from(KEYS),
            "with_idp": st.booleans(),
            "token": st.one_of(st.none(), st.integers(min_value=0)),
        }

        @rule(**write_args)
        def write(self, scope: str, key: str, with_idp: bool, token: int | None) -> None:
            chosen = None if token is None or not self.tokens else self.tokens[token % len(self.tokens)]
            self._write(scope, key, with_idp, chosen)

        @rule(**write_args)
        def write_more(self, scope: str, key: str, with_idp: bool, token: int | None) -> None:
            self.write(scope, key, with_idp, token)

        @rule(
            kind=st.sampled_from(["scope", "key"]),
            target_scope=st.sampled_from(SCOPES),
            target_key=st.sampled_from(KEYS),
            target_subject=st.one_of(st.none(), st.sampled_from(SUBJECTS)),
        )
        def reauthorize(
            self, kind: str, target_scope: str, target_key: str, target_subject: str | None
        ) -> None:
            if kind == "scope":
                secret = self.store.reauthorize(target_scope, subject=target_subject)
                target: object = target_scope
            else:
                secret = self.store.reauthorize(target_scope, target_key, subject=target_subject)
                target = (target_scope, target_key)
            self.tokens.append(Token(secret, kind, target, next(self.seq), target_subject))

        def _issue(self, kind: str, scope: str, key: str, subjects: set[str], depth: int) -> Token:
            """A fresh token aimed at this write: a prefix scope or the exact key, naming one of
            its subjects too for kind "subject" (at a prefix) and "key+subject"."""
            subject = (
                sorted(subjects)[depth % len(subjects)] if kind.endswith("subject") and subjects else None
            )
            if kind.startswith("key"):
                secret = self.store.reauthorize(scope, key, subject=subject)
                token = Token(secret, "key", (scope, key), next(self.seq), subject)
            else:
                target = prefixes(scope)[depth % len(prefixes(scope))]
                secret = self.store.reauthorize(target, subject=subject)
                token = Token(secret, "scope", target, next(self.seq), subject)
            self.tokens.append(token)
            return token

        def tombstoned_slots(self) -> list[tuple[str, str, bool]]:
            """(scope, key, needs idp:x) of every write some tombstone covers."""
            m = self.model
            slots = {(d, k, False) for (s, k) in m.key_subtree for d in SCOPES if within(d, s)}
            slots |= {(s, k, False) for (s, k) in m.key_exact}
            slots |= {(d, k, False) for s in m.scope_ts for d in SCOPES if within(d, s) for k in KEYS}
            for x in m.subject_ts:
                slots |= {
                    (sc, k, x == IDP) for sc in SCOPES for k in KEYS if x == IDP or x in default_subjects(sc)
                }
            return sorted(slots)

        @precondition(lambda self: bool(self.tombstoned_slots()))
        @rule(
            pick=st.integers(min_value=0),
            with_idp=st.booleans(),
            token_kind=st.sampled_from([None, "scope", "key", "subject", "key+subject"]),
            depth=st.integers(min_value=0, max_value=3),
        )
        def write_where_forgotten(
            self, pick: int, with_idp: bool, token_kind: str | None, depth: int
        ) -> None:
            """Aim at tombstoned targets, with no token or a fresh one of some kind."""
            slots = self.tombstoned_slots()
            scope, key, needs_idp = slots[pick % len(slots)]
            with_idp = with_idp or needs_idp
            subjects = default_subjects(scope) | ({IDP} if with_idp else set())
            token = None if token_kind is None else self._issue(token_kind, scope, key, subjects, depth)
            self._write(scope, key, with_idp, token)

        @precondition(lambda self: self.last is not None)
        @rule(reuse_token=st.booleans())
        def write_last_slot_again(self, reuse_token: bool) -> None:
            """After a lift, no token is needed until the next forget; a used token stays used."""
            assert self.last is not None
            scope, key, with_idp = self.last
            self._write(scope, key, with_idp, self.tokens[-1] if reuse_token and self.tokens else None)

        @precondition(lambda self: self.last is not None)
        @rule(mode=st.sampled_from(MODES), include_ancestors=st.booleans())
        def forget_last_slot(self, mode: str, include_ancestors: bool) -> None:
            """Forget what was just written: cycles of forget / reauthorize / write / forget."""
            assert self.last is not None
            scope, key, _ = self.last
            self._forget_key(scope, key, mode, include_ancestors)

        @precondition(lambda self: bool(self.tokens))
        @rule(pick=st.integers(min_value=0), scope=st.sampled_from(SCOPES), key=st.sampled_from(KEYS))
        def stale_write_with_token(self, pick: int, scope: str, key: str) -> None:
            """base_version < v_f: StaleWriteError even with a token, and the token is kept."""
            newest = self.model.newest_covering(scope, key, default_subjects(scope))
            if newest is None:
                return
            token = self.tokens[pick % len(self.tokens)]
            with pytest.raises(StaleWriteError):
                self.store.write(scope, key, 0, base_version=newest.version - 1, reauthorization=token.secret)

        @precondition(lambda self: bool(self.model.data))
        @rule(pick=st.integers(min_value=0))
        def compare_and_set(self, pick: int) -> None:
            scope, key = sorted(self.model.data)[pick % len(self.model.data)]
            current = self.store.read(scope, key, fallthrough=False)
            assert current is not None
            with pytest.raises(StaleWriteError):
                self.store.write(scope, key, -1, base_version=current.version - 1)
            self._write(scope, key, False, None, base_version=current.version)

        # -- forgets ------------------------------------------------------------------------
        @rule(
            # key forgets are the common case; a scope forget (T above all) blocks most writes
            kind=st.sampled_from(["key", "key", "key", "scope", "subject"]),
            scope=st.sampled_from(SCOPES),
            key=st.sampled_from(KEYS),
            mode=st.sampled_from(MODES),
            include_ancestors=st.booleans(),
            subject=st.sampled_from(SUBJECTS),
        )
        def forget(
            self, kind: str, scope: str, key: str, mode: str, include_ancestors: bool, subject: str
        ) -> None:
            if kind == "key":
                self._forget_key(scope, key, mode, include_ancestors)
            elif kind == "scope":
                self._forget_scope(scope, mode)
            else:
                self._forget_subject(subject)

        def _forget_key(self, scope: str, key: str, mode: str, include_ancestors: bool) -> None:
            holders = [p for p in prefixes(scope)[:-1] if (p, key) in self.model.data]
            if holders and not include_ancestors:
                with pytest.raises(ScopeClosureError) as info:
                    self.store.forget(scope, key, mode=mode)
                assert set(info.value.ancestors) == set(holders)
                return
            request = self.store.forget(scope, key, mode=mode, include_ancestors=include_ancestors)
            assert request.mode == mode
            mark = Mark(next(self.seq), request.version)
            self.model.key_subtree[(scope, key)] = mark
            for holder in holders:
                self.model.key_exact[(holder, key)] = mark
                del self.model.data[(holder, key)]
            for s, k in list(self.model.data):
                if k == key and within(s, scope):
                    del self.model.data[(s, k)]

        def _forget_scope(self, scope: str, mode: str) -> None:
            request = self.store.forget(scope, mode=mode)
            self.model.scope_ts[scope] = Mark(next(self.seq), request.version)
            for s, k in list(self.model.data):
                if within(s, scope):
                    del self.model.data[(s, k)]

        def _forget_subject(self, subject: str) -> None:
            request = self.store.forget_subject(subject)
            self.model.subject_ts[subject] = Mark(next(self.seq), request.version)
            for slot, (_, subjects) in list(self.model.data.items()):
                if subject in subjects:
                    del self.model.data[slot]

        @rule()
        def restart(self) -> None:
            self.store = reopen_store(self.store)

        # -- the model must match after every step -------------------------------------------
        @invariant()
        def store_matches_model(self) -> None:
            records = self.store.list(T, include_descendants=True)
            # what each scope holds itself (= read with fallthrough=False), for the whole tree
            assert [(r.scope, r.key, r.value) for r in records] == self.model.listing()
            for scope in SCOPES:  # R1 resolution: the scope first, then each ancestor
                for key in KEYS:
                    got = self.store.read(scope, key)
                    assert (None if got is None else (got.scope, got.value)) == self.model.read(scope, key)

        @invariant()
        def ids_resolve(self) -> None:
            if self.last is not None:  # spot-check one slot per step: get(id) == read(..., False)
                scope, key, _ = self.last
                got = self.store.read(scope, key, fallthrough=False)
                if got is not None:
                    assert self.store.get(got.id) == got

    return StoreMachine


# A failing run shrinks for up to Hypothesis's 5-minute cap: give it room to print a minimal repro.
@pytest.mark.timeout(900)
def test_store_matches_the_model(store_factory: StoreFactory) -> None:
    machine = make_machine(store_factory, store_factory.reopen)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=int(os.environ.get("CENOTAPH_MODEL_EXAMPLES", "100")),  # longer hunts: raise it
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
