"""Who is calling and what they may reach: bearer keys, roles, and confinement to a prefix.

Every rule about reach lives here. A key reaches the scopes inside its prefix and nothing else;
whatever lies outside (or does not exist, or was forgotten) answers :class:`NotVisible`, one
404 with one body.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cenotaph import Scope

from ...errors import InvalidScopeError, InvalidValueError
from ...model import Record
from ..apikeys import ApiKey, Role
from .context import Service, service_of
from .problems import ApiError, NotVisible

__all__ = [
    "agent_key",
    "any_key",
    "consumer_of",
    "exporter_key",
    "inside",
    "operator_key",
    "owned_by_reach",
    "subject_inside",
    "subjects_inside",
    "visible",
]

_bearer = HTTPBearer(auto_error=False, description="an API key from `cenotaph api-keys create`")


async def any_key(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> ApiKey:
    """The live key of the request (any role, a consumer's too), else 401. Async: a dependency that never blocks for
    long (one stat, one HMAC) runs on the event loop instead of a trip through the thread pool."""
    key = service_of(request).keys.authenticate(credentials.credentials if credentials else None)
    if key is None:
        raise ApiError(
            401,
            "unauthorized",
            "send a live API key as 'Authorization: Bearer <key>' (create one with `cenotaph api-keys create`)",
        )
    request.state.api_key = key
    return key


async def agent_key(key: Annotated[ApiKey, Depends(any_key)]) -> ApiKey:
    """The request's key if it is an agent or operator key, else 403: a consumer key only reads,
    exports and answers its own erasure events."""
    if key.role == Role.CONSUMER:
        raise ApiError(
            403, "forbidden", "a consumer key may only read, export and fetch or acknowledge its events"
        )
    return key


async def exporter_key(key: Annotated[ApiKey, Depends(any_key)]) -> ApiKey:
    """The request's key if it may export a subject (an operator or a consumer key), else 403."""
    if key.role == Role.AGENT:
        raise ApiError(403, "forbidden", "this needs an operator key; an agent key may not do it")
    return key


def consumer_of(key: ApiKey) -> str | None:
    """The consumer a key acts for (a consumer key's), else None: what it reads is recorded as taken."""
    return key.consumer if key.role == Role.CONSUMER else None


async def operator_key(key: Annotated[ApiKey, Depends(agent_key)]) -> ApiKey:
    """The request's key if it is an operator key, else 403."""
    if key.role != Role.OPERATOR:
        raise ApiError(403, "forbidden", "this needs an operator key; an agent key may not do it")
    return key


def inside(key: ApiKey, scope: str) -> Scope:
    """The scope, parsed, if the key reaches it; a malformed one is 422, a foreign one 404."""
    parsed = Scope.parse(scope)
    if not key.covers(parsed):
        raise NotVisible
    return parsed


def visible(key: ApiKey, record: Record | None) -> bool:
    return record is not None and key.covers(Scope.parse(record.scope))


def subject_inside(key: ApiKey, subject: str) -> str:
    """A subject the key may erase or export: a scope path inside its prefix (its users)."""
    try:
        parsed = Scope.parse(subject)
    except InvalidScopeError:
        raise NotVisible from None
    if not key.covers(parsed):
        raise NotVisible
    return parsed.path


def subjects_inside(key: ApiKey, subjects: Iterable[str] | None) -> list[str] | None:
    """Extra subjects of a write: each a scope path inside the key's prefix, so no key can tag a
    record with a subject whose erasure or export belongs to another tenant."""
    if subjects is None:
        return None
    checked = []
    for subject in subjects:
        try:
            parsed = Scope.parse(subject)
        except InvalidScopeError:
            parsed = None
        if parsed is None or not key.covers(parsed):
            raise InvalidValueError(
                f"over HTTP, subjects must be scope paths inside this key's prefix ({key.prefix}), "
                f"e.g. {key.prefix}/user:alice"
            )
        checked.append(parsed.path)
    return checked


def owned_by_reach(svc: Service, key: ApiKey, owner_id: str | None) -> bool:
    """True if the key that made an object lies inside ``key``'s reach (same tenant, prefix within)."""
    if owner_id is None:
        return False
    owner = svc.keys.get(owner_id)
    return owner is not None and owner.tenant == key.tenant and key.covers(owner.scope)
