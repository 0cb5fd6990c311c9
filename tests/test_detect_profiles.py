"""What detectors know of a format comes from the format's module (its FormatProfile)."""

from __future__ import annotations

import duckdb

from loophound.detect import DETECTORS
from loophound.detect.profiles import NEUTRAL, extra_key_sql, profile
from loophound.formats import FORMATS
from loophound.formats.base import FormatProfile


def test_a_format_without_a_profile_is_neutral():
    assert FORMATS["generic"].profile == FormatProfile() == NEUTRAL
    assert profile("no-such-format") is NEUTRAL
    assert profile(None) is NEUTRAL


def test_sven_limits_are_the_documented_defaults_of_the_message_detectors():
    sven = FORMATS["sven"].profile
    for name in ("ping_pong", "depth_violation"):
        p = DETECTORS[name].params()
        assert (p.max_hop_depth, p.break_s) == (sven.max_hop_depth, sven.break_threshold_s)


def test_an_extra_key_is_read_only_for_the_formats_whose_profile_names_it():
    con = duckdb.connect()
    con.execute("""CREATE TABLE events AS SELECT * FROM (VALUES
        ('sven', '{"direction":"inbound"}'), ('generic', '{"direction":"inbound"}'),
        ('sven', '{"seq":1}'), ('sven', NULL)) t(format, extra)""")
    got = con.execute(f"SELECT {extra_key_sql('direction_key')} FROM events").fetchall()
    assert [g for (g,) in got] == ["inbound", None, None, None]


def test_without_a_format_that_names_the_key_nothing_is_read(monkeypatch):
    import loophound.detect.profiles as profiles

    monkeypatch.setattr(profiles, "FORMATS", {"generic": FORMATS["generic"]})
    assert extra_key_sql("direction_key", "e") == "CAST(NULL AS VARCHAR)"
