"""Masking ids, times and numbers: the SQL used at ingest and the Python used by detectors'
kernels give the same text for any input, and the same call with other ids is one key."""

from __future__ import annotations

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from loophound.normalise import key, key_sql, mask, mask_sql

CON = duckdb.connect()
SQL = f"SELECT {mask_sql('CAST($text AS VARCHAR)')}, " \
      f"{key_sql('CAST($text AS VARCHAR)', 'CAST($other AS VARCHAR)')}, " \
      f"{mask_sql('CAST($text AS VARCHAR)', numbers=False)}"

pieces = st.sampled_from(["git commit -m 'fix'", "/tmp/run-", "550e8400-e29b-41d4-a716-446655440000",
                          "2026-06-18T23:42:20.123Z", "10.0.0.12", "deadbeef1234", " ", "id=",
                          "ERROR", "é", "\x1b[2J", "0x", "-", "."])
texts = st.lists(st.one_of(pieces, st.text(max_size=6), st.integers(0, 10**12).map(str)),
                 max_size=8).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=texts, other=st.one_of(st.none(), texts))
def test_sql_and_python_mask_alike(text, other):
    sql_mask, sql_key, sql_ids = CON.execute(SQL, {"text": text, "other": other}).fetchall()[0]
    assert sql_mask == mask(text)
    assert sql_key == key(text, other)
    assert sql_ids == mask(text, numbers=False)


def test_the_same_call_with_other_ids_is_one_key():
    a = key("read_file", '{"path": "/tmp/run-1234/out.txt", "req": "550e8400-e29b-41d4-a716-446655440000"}')
    b = key("read_file", '{"path": "/tmp/run-98/out.txt", "req": "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}')
    c = key("read_file", '{"path": "/tmp/run-98/other.txt"}')
    assert a == b != c
    assert mask("commit 3f2a9c1d4e rejected at 2026-01-01 10:00:00 (3 errors)") == (
        "commit <HEX> rejected at <TS> (<NUM> errors)")
    assert key(None, "x") is None


def test_ids_masked_numbers_kept_tell_a_batch_from_a_repeat():
    """A batch walking through items differs in a number; a repeat only in its ids."""
    assert mask("check --cart 1001", numbers=False) != mask("check --cart 1002", numbers=False)
    assert mask("get 550e8400-e29b-41d4-a716-446655440000 at 2026-06-18T23:42:20Z",
                numbers=False) == "get <UUID> at <TS>"
