"""W1 dominance: may a write land on a target covered by tombstones? (Pure policy, no I/O.)

A write's *targets* are every tombstone target that covers it: the scope token of each prefix
of its scope (scope forgets), the key-subtree token of each prefix and the key-exact token of
its own scope (key forgets), and the token of each of its subjects (subject forgets).
A *lift* is recorded when a reauthorization token is consumed, at the token's *issue* version:
it un-blocks the tombstones older than the token for writes inside its target. A tombstone newer
than the token -- a later forget, or one between the token's issue and its use elsewhere in a
scope token's subtree -- stays in force.

A token names a scope (its subtree) or a key in one scope, and optionally a subject
(``reauthorize(scope[, key], subject=...)``). It is accepted only by a write inside what it
names, and it lifts what blocked that write: its scope or key target if a scope or key tombstone
did, the named subject if that subject's did. So one token reopens a target forgotten both by a
scope forget and by a subject erasure. A subject lift, like the subject tombstone it lifts,
covers every record carrying the subject, in any scope. Tokens of kind ``subject`` were issued before tokens named a
scope (schema 3); they are accepted in any scope and lift only their subject.
"""

from __future__ import annotations

from dataclasses import dataclass

from .crypto.tokens import TokenMaker
from .errors import ForgottenError, StaleWriteError
from .scope import Scope

__all__ = ["WriteTargets", "Reauth", "blocking", "decide"]


@dataclass(frozen=True, slots=True)
class WriteTargets:
    scope_token: bytes
    key_token: bytes
    prefix_tokens: tuple[bytes, ...]  # root .. own scope
    key_targets: tuple[bytes, ...]  # key-subtree of each prefix + key-exact of own scope
    subject_tokens: tuple[bytes, ...]

    @classmethod
    def build(
        cls, tokens: TokenMaker, scope: Scope, key: str, subject_tokens: tuple[bytes, ...]
    ) -> WriteTargets:
        prefixes = tokens.scope_chain(scope)
        key_token = tokens.key(key)
        key_targets = tuple(tokens.key_subtree(p, key_token) for p in prefixes)
        return cls(
            scope_token=prefixes[-1],
            key_token=key_token,
            prefix_tokens=prefixes,
            key_targets=(*key_targets, tokens.key_exact(prefixes[-1], key_token)),
            subject_tokens=subject_tokens,
        )

    @classmethod
    def names_only(
        cls, tokens: TokenMaker, scope: Scope, key: str, subject_tokens: tuple[bytes, ...]
    ) -> WriteTargets:
        """The write's name tokens without its key targets: only for a store with no tombstone
        at all (nothing to check the key targets against)."""
        prefixes = tokens.scope_chain(scope)
        return cls(prefixes[-1], tokens.key(key), prefixes, (), subject_tokens)

    @property
    def exact_key_target(self) -> bytes:
        return self.key_targets[-1]

    def tombstone_targets(self) -> tuple[bytes, ...]:
        return (*self.prefix_tokens, *self.key_targets, *self.subject_tokens)

    def lift_targets(self) -> tuple[bytes, ...]:
        return (*self.general_lift_targets(), *self.subject_tokens)

    def general_lift_targets(self) -> tuple[bytes, ...]:
        """The lifts that reopen this write from scope and key tombstones: a scope token's of a
        prefix, or a key token's of its own slot."""
        return (*self.prefix_tokens, self.exact_key_target)


@dataclass(frozen=True, slots=True)
class Reauth:
    """A presented reauthorization token as stored: kind, target, issue and use versions."""

    kind: str  # "scope" | "key"; "subject" for a token issued before tokens named a scope
    target: bytes
    issued_version: int
    consumed_version: int | None
    subject: bytes | None = None  # the subject token it also lifts, if it names one

    def lifts(self, general: bool, subject: bool) -> list[bytes]:
        """The targets a consumed token lifts: its scope or key target if a general tombstone
        blocked the write, its subject if the subject's tombstone did."""
        if self.kind == "subject":
            return [self.target] if subject else []
        named = [self.target] if general else []
        return [*named, self.subject] if subject and self.subject is not None else named

    def covers(self, targets: WriteTargets, general: bool, subjects: set[bytes]) -> bool:
        """May this token unblock a write to ``targets`` blocked by general tombstones
        (``general``) and by the tombstones of ``subjects``?"""
        if self.kind == "subject":
            return not general and subjects == {self.target}
        if self.kind == "scope":
            inside = self.target in targets.prefix_tokens
        else:
            inside = self.target == targets.exact_key_target
        return inside and (not subjects or subjects == {self.subject})


def blocking(
    targets: WriteTargets, tombstones: dict[bytes, int], lifts: dict[bytes, int]
) -> tuple[list[int], dict[bytes, int]]:
    """The tombstones that refuse a write to ``targets`` without a token: the versions of the
    scope and key ones no lift reaches, and the subject ones by subject token."""
    general = [tombstones[t] for t in (*targets.prefix_tokens, *targets.key_targets) if t in tombstones]
    lifted = max((lifts.get(t, 0) for t in targets.general_lift_targets()), default=0)
    by_subject = {t: tombstones[t] for t in targets.subject_tokens if t in tombstones}
    return [v for v in general if v > lifted], {t: v for t, v in by_subject.items() if v > lifts.get(t, 0)}


def decide(
    targets: WriteTargets,
    tombstones: dict[bytes, int],
    lifts: dict[bytes, int],
    base_version: int | None,
    reauth: Reauth | None,
) -> list[bytes]:
    """Raise if the write is dominated; return the lift targets to record if a token is consumed
    (empty if the write needs no token)."""
    newest = max((tombstones[t] for t in targets.tombstone_targets() if t in tombstones), default=None)
    if newest is None:
        return []
    if base_version is not None and base_version < newest:
        raise StaleWriteError(
            f"base_version {base_version} predates a forget at version {newest}; re-read the target "
            "and decide again (a reauthorization cannot revive a stale write)"
        )
    blocked, blocked_subjects = blocking(targets, tombstones, lifts)
    if not blocked and not blocked_subjects:
        return []
    top = max([*blocked, *blocked_subjects.values()])
    if reauth is None:
        raise ForgottenError(
            f"this target was forgotten at version {top}; writing it again needs a token from "
            "store.reauthorize(...) issued after that forget",
            top,
        )
    if reauth.consumed_version is not None:
        raise ForgottenError("that reauthorization token was already used; request a new one", top)
    if not reauth.covers(targets, bool(blocked), set(blocked_subjects)):
        raise ForgottenError(
            "the reauthorization token does not cover this write: a token is good only inside the scope "
            "(or for the key) it names, and a subject's erasure needs a token naming that subject "
            "(store.reauthorize(scope, subject=...))",
            top,
        )
    if reauth.issued_version < top:
        raise ForgottenError(
            f"the reauthorization token predates the forget at version {top}; request a new one", top
        )
    return reauth.lifts(bool(blocked), bool(blocked_subjects))
