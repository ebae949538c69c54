"""The payload and output codec: decode_payload is json.loads for bytes, minus its cost."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from schedd.worker._context import decode_payload, encode_value

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _reference(data: bytes) -> Any:
    """The definition: json.loads when it parses (any encoding it detects), else the bytes."""
    if not data:
        return None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return data


@given(st.binary(max_size=40))
def test_any_bytes_decode_like_json_loads(data: bytes) -> None:
    assert decode_payload(data) == _reference(data)


@given(JSON, st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32-be"]))
def test_json_in_every_encoding_json_loads_detects(value: Any, encoding: str) -> None:
    data = json.dumps(value).encode(encoding)
    assert decode_payload(data) == _reference(data)


@given(JSON)
def test_encode_value_is_compact_json(value: Any) -> None:
    assert encode_value(value) == json.dumps(value, separators=(",", ":")).encode()
    assert decode_payload(encode_value(value)) == _reference(encode_value(value))


def test_bytes_pass_through_both_ways() -> None:
    assert encode_value(b"\xff\x00") == b"\xff\x00"
    assert encode_value(memoryview(b"ab")) == b"ab"
    assert decode_payload(b"\xff\x00") == b"\xff\x00"
    assert decode_payload(b"") is None
