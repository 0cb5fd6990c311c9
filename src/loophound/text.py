"""Text from logs made inert before it reaches a terminal.

A log is written by the agents being investigated, so an actor name, an error, a path or any
cell may hold escape sequences: a title change (`ESC ] 0 ; ... BEL`), a clear screen
(`ESC [ 2 J`), hidden text (`ESC [ 8 m`), or a Unicode bidi override that shows the rest of
the line backwards. `inert` shows every such character as an escape (`\\x1b`, `\\u202e`), so
what the analyst sees is what the log holds and nothing in it acts on the terminal.

Names that look alike are told apart the same way (`apart`): `admin` with a zero-width space,
a soft hyphen or a left-to-right mark in it, `аdmin` with a Cyrillic `а`, or `ａdmin` with a
fullwidth `ａ` would each be printed as `admin`, and an actor posing as another would pass for
it. Characters that show as nothing (zero-width, soft hyphen, direction marks, variation
selectors, tags), spaces other than the space, a letter of another script inside a word of
Latin letters, and a compatibility form of an ASCII character are shown as escapes
(`adm\\u200bin`, `\\u0430dmin`). A word wholly in one script (`привет`) is left as it is.

Display only: CSV, JSON and Parquet written to a file or a pipe keep the data exact (`json_inert`
spells the same characters as JSON escapes, which parse back to the same text). Rich markup is
a separate matter: text printed through markup still needs `rich.markup.escape` after this.
"""

from __future__ import annotations

import re
import unicodedata

# C0 controls (newline and tab included: a table cell is one line), DEL, C1 controls
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
# bidi embeddings and overrides (LRE RLE PDF LRO RLO) and isolates (LRI RLI FSI PDI)
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]

# shown as nothing: soft hyphen, combining grapheme joiner, Arabic letter mark, Hangul fillers,
# Khmer inherent vowels, Mongolian selectors and vowel separator, zero-width space/joiners and
# direction marks, word joiner and invisible operators, deprecated format controls, variation
# selectors, BOM, tags; and the spaces that are not U+0020
_INVISIBLE = [0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, *range(0x180B, 0x1810),
              *range(0x200B, 0x2010), *range(0x2060, 0x2065), *range(0x206A, 0x2070), 0x3164,
              *range(0xFE00, 0xFE10), 0xFEFF, 0xFFA0, *range(0xE0000, 0xE0080),
              *range(0xE0100, 0xE01F0),
              0x00A0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000]


def _escape(c: int) -> str:
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def _json_escape(c: int) -> str:
    if c < 0x10000:
        return f"\\u{c:04x}"
    c -= 0x10000
    return f"\\u{0xD800 + (c >> 10):04x}\\u{0xDC00 + (c & 0x3FF):04x}"


_INERT = {c: f"\\x{c:02x}" for c in _CONTROLS} | {c: f"\\u{c:04x}" for c in _BIDI} | {
    c: _escape(c) for c in _INVISIBLE}
_INERT_LINES = {c: e for c, e in _INERT.items() if c != 0x0A}
_APART = {c: _escape(c) for c in _INVISIBLE}
# json.dumps escapes C0 itself; what it leaves raw, written as the JSON escape of the same text
_JSON = {c: _json_escape(c) for c in [0x7F, *range(0x80, 0xA0), *_BIDI, *_INVISIBLE]}
_WORD = re.compile(r"[^\W\d_]+|\w")  # a run of letters, or one digit or other word character


def _script(char: str) -> str:
    """The script a letter's Unicode name begins with: LATIN, CYRILLIC, GREEK, ..."""
    return unicodedata.name(char, "?").split(" ", 1)[0]


def _lookalike(char: str) -> bool:
    """A compatibility form of an ASCII character (fullwidth `ａ`, mathematical `𝐚`, `ﬁ`)."""
    return not char.isascii() and unicodedata.normalize("NFKC", char).isascii()


def _mark_word(match: re.Match, escape) -> str:
    word = match.group()
    if word.isascii():
        return word
    scripts = {_script(c) for c in word if c.isalpha()}
    mixed = "LATIN" in scripts and len(scripts) > 1
    return "".join(escape(ord(c)) if _lookalike(c) or (mixed and not c.isascii()
                                                       and _script(c) != "LATIN") else c
                   for c in word)


def _lookalikes(text: str, escape) -> str:
    """Letters of another script inside a Latin word, and compatibility forms of ASCII
    characters, written with `escape`."""
    if text.isascii():
        return text
    return _WORD.sub(lambda m: _mark_word(m, escape), text)


def apart(text: str) -> str:
    """`text` with what would make two different names look the same shown as escapes:
    invisible characters and odd spaces (`\\u200b`, `\\xa0`), a letter of another script in a
    Latin word (`\\u0430dmin`), a compatibility form of ASCII (`\\uff41dmin`). Controls are
    left to the caller (`inert` escapes them too; the report keeps newlines and tabs)."""
    return _lookalikes(text.translate(_APART), _escape)


def inert(text: str, newlines: bool = False) -> str:
    """`text` with every control character and bidi override shown as an escape: ESC as
    `\\x1b`, U+202E as `\\u202e`, and lookalikes told apart as `apart` does. With `newlines`,
    line breaks are kept (a message of several lines, such as DuckDB's error with its caret
    line)."""
    return _lookalikes(text.translate(_INERT_LINES if newlines else _INERT), _escape)


def json_inert(text: str) -> str:
    """JSON text (from `json.dumps`) with DEL, C1 controls, bidi overrides and lookalikes
    written as `\\uXXXX` escapes: the same JSON value, and nothing in it acts on a terminal
    or passes for another name there."""
    return _lookalikes(text.translate(_JSON), _json_escape)


__all__ = ["apart", "inert", "json_inert"]
