"""check_text: the ASCII fast path decides exactly as the general Unicode path."""

from __future__ import annotations

import unicodedata

from hypothesis import example, given
from hypothesis import strategies as st

from schedd._errors import InvalidArgument
from schedd.model._fields import MAX_TEXT_BYTES, check_text


def _reference(value: str) -> tuple[str, str]:
    """The rule as written for any text: NFC, then size, '/', and Unicode control categories;
    ("ok", text) or ("error", which rule)."""
    text = unicodedata.normalize("NFC", value)
    if not text:
        return ("ok", text)
    if len(text.encode()) > MAX_TEXT_BYTES:
        return ("error", "bytes")
    if "/" in text:
        return ("error", "'/'")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in text):
        return ("error", "control characters")
    return ("ok", text)


@given(st.text(st.characters(max_codepoint=0x7F)) | st.text())
@example("a\tb")
@example("a\x7fb")
@example("e\u0301")
@example("a\u200bb")
@example("x" * 201)
def test_check_text_matches_the_unicode_rule(value: str) -> None:
    kind, detail = _reference(value)
    if kind == "ok":
        assert check_text("f", value) == detail
    else:
        try:
            check_text("f", value)
        except InvalidArgument as exc:
            assert detail in exc.reason
        else:
            raise AssertionError(f"{value!r} passed, the rule refuses it ({detail})")
