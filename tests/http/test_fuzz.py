"""A property-based fuzz of every route from the OpenAPI document (schemathesis): whatever is sent,
with a live operator key, an agent key or none, the server answers no 5xx, only documented status
codes, and bodies that match their documented schemas. Malformed input is rejected with a 4xx."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import cenotaph
from cenotaph.service.apikeys import ApiKeyRing
from cenotaph.service.http import create_app

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
EXAMPLES = 40


class Fuzzed:
    """The app under fuzz, built at import: schemathesis reads its schema while collecting."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="cenotaph-fuzz-"))
        data = self.base / "data"
        self.store = cenotaph.open(data)
        keys = ApiKeyRing(data)
        self.app = create_app(self.store, keys, backup_dir=self.base / "backups", secure_cookies=False)
        # data the generated requests can land on: the schema's example scope is inside the prefix
        self.store.write("tenant:acme/user:alice", "diet", "vegetarian")
        self.operator = keys.create(tenant="acme", role="operator")[1]
        self.agent = keys.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")[1]

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self.base, ignore_errors=True)


FUZZED = Fuzzed()
schema = schemathesis.openapi.from_asgi("/openapi.json", FUZZED.app)


@pytest.fixture(scope="module", autouse=True)
def _close_fuzzed() -> Iterator[None]:
    yield
    FUZZED.close()


FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)


def _check(case: Any, secret: str | None) -> None:
    headers = {} if secret is None or _mutates_authorization(case) else {"Authorization": f"Bearer {secret}"}
    case.call_and_validate(headers=headers, checks=CHECKS)


def _mutates_authorization(case: Any) -> bool:
    """A negative case that removed or broke the Authorization header must be sent as generated
    (adding the live key back would make the check expect a refusal of an authorized request)."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_negative:
        return False
    mutations = getattr(meta.phase.data, "mutations", None) or []
    return any(str(getattr(m, "parameter", "")).lower() == "authorization" for m in mutations)


@schema.parametrize()
@FUZZ
def test_every_route_with_an_operator_key(case: Any) -> None:
    _check(case, FUZZED.operator)


@schema.parametrize()
@FUZZ
def test_every_route_with_an_agent_key(case: Any) -> None:
    _check(case, FUZZED.agent)


@schema.parametrize()
@FUZZ
def test_every_route_with_no_key(case: Any) -> None:
    _check(case, None)
