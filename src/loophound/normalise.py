"""Compare actions, results and errors by what they mean, not by the ids in them.

An agent stuck in a loop repeats the same call, but the call's text rarely repeats to the
letter: a request id, a timestamp, a temp path's number or a hash changes every time. Log
template miners (Drain3's masking is the reference) replace such variable parts by a token
before comparing; so does loophound, with one list of masks used two ways: as a SQL
expression over whole columns at ingest (DuckDB, RE2 syntax) and as a Python function for
detectors' pure kernels and tests. Both give the same text for the same input.
"""

from __future__ import annotations

import re

from .db import sql_literal

# (pattern, token), applied in order: the specific shapes first, bare numbers last. Plain
# RE2 syntax that Python's `re` reads the same way.
MASKS: tuple[tuple[str, str], ...] = (
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<UUID>"),
    (r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "<TS>"),
    (r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", "<IP>"),
    (r"\b(?:0x)?[0-9a-fA-F]{8,}\b", "<HEX>"),
    (r"\d+(?:\.\d+)?", "<NUM>"),
)
# ASCII: RE2 reads \b and \d as ASCII only, and so must Python, or `2é` would differ
_COMPILED = tuple((re.compile(p, re.ASCII), t) for p, t in MASKS)


NUMBER = "<NUM>"  # the token of the last mask: bare numbers


def mask(text: str | None, numbers: bool = True) -> str | None:
    """`text` with ids, times, addresses, hashes and numbers replaced by tokens; with
    `numbers=False`, bare numbers are kept (`item 17` and `item 18` stay apart: a batch walking
    through items is not one call repeated)."""
    if text is None:
        return None
    for pattern, token in _COMPILED:
        if numbers or token != NUMBER:
            text = pattern.sub(token, text)
    return text


def mask_sql(expr: str, numbers: bool = True) -> str:
    """SQL: the same masking as `mask`, over a VARCHAR expression."""
    out = expr
    for pattern, token in MASKS:
        if numbers or token != NUMBER:
            out = f"regexp_replace({out}, {sql_literal(pattern)}, {sql_literal(token)}, 'g')"
    return out


def key_sql(*exprs: str) -> str:
    """SQL: a 16-hex-digit key of the masked values (NULL when the first is NULL)."""
    joined = " || chr(31) || ".join(f"coalesce({mask_sql(f'CAST({e} AS VARCHAR)')}, '')"
                                    for e in exprs)
    return f"CASE WHEN {exprs[0]} IS NOT NULL THEN left(md5({joined}), 16) END"


def key(*values: str | None) -> str | None:
    """The key `key_sql` computes, in Python."""
    import hashlib

    if values[0] is None:
        return None
    joined = "\x1f".join(mask(v) or "" for v in values)
    return hashlib.md5(joined.encode()).hexdigest()[:16]
