"""The hot-path JSON encoder is byte-for-byte the stdlib's compact encoder, errors included."""

from __future__ import annotations

import json

import pytest

from cenotaph.jsoncodec import compact_encoder

SAMPLES: list[object] = [
    "plain",
    'quote " backslash \\ newline \n nul \0 é \u2028 🎉',
    0,
    -1,
    10**30,
    1.5,
    -0.0,
    1e300,
    None,
    True,
    [],
    {},
    [1, {"a": [None, "ü"], "b": {"c": []}}],
    {"b": 1.0, "a": -0.0},
    (1, 2),
    {1: "int key", 2.5: "float key", False: "bool key", None: "none key"},
]


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("allow_nan", [True, False])
def test_the_output_is_the_stdlib_compact_encoding(ensure_ascii: bool, allow_nan: bool) -> None:
    ours = compact_encoder(ensure_ascii=ensure_ascii, allow_nan=allow_nan)
    stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=ensure_ascii, allow_nan=allow_nan).encode
    for value in SAMPLES:
        assert ours(value) == stdlib(value), value


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [float("-inf")]])
def test_nan_is_refused_when_not_allowed_and_spelled_like_the_stdlib_when_allowed(value: object) -> None:
    with pytest.raises(ValueError):
        compact_encoder(ensure_ascii=False, allow_nan=False)(value)
    assert compact_encoder(ensure_ascii=True, allow_nan=True)(value) == json.dumps(
        value, separators=(",", ":")
    )


@pytest.mark.parametrize("value", [object(), {"a": {1, 2}}, b"bytes", {("tuple", "key"): 1}])
def test_a_value_json_cannot_hold_is_a_type_error(value: object) -> None:
    with pytest.raises(TypeError):
        compact_encoder(ensure_ascii=True, allow_nan=True)(value)


def test_a_value_that_contains_itself_is_a_recursion_error_not_a_hang() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(RecursionError):
        compact_encoder(ensure_ascii=False, allow_nan=False)(loop)
