"""Text from logs made inert before it reaches a terminal.

A log is written by the agents being investigated, so an actor name, an error, a path or any
cell may hold escape sequences: a title change (`ESC ] 0 ; ... BEL`), a clear screen
(`ESC [ 2 J`), hidden text (`ESC [ 8 m`), or a Unicode bidi override that shows the rest of
the line backwards. `inert` shows every such character as an escape (`\\x1b`, `\\u202e`), so
what the analyst sees is what the log holds and nothing in it acts on the terminal.

Display only: CSV, JSON and Parquet written to a file or a pipe keep the data exact (`json_inert`
spells the same characters as JSON escapes, which parse back to the same text). Rich markup is
a separate matter: text printed through markup still needs `rich.markup.escape` after this.
"""

from __future__ import annotations

# C0 controls (newline and tab included: a table cell is one line), DEL, C1 controls
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
# bidi embeddings and overrides (LRE RLE PDF LRO RLO) and isolates (LRI RLI FSI PDI)
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]

_INERT = {c: f"\\x{c:02x}" for c in _CONTROLS} | {c: f"\\u{c:04x}" for c in _BIDI}
_INERT_LINES = {c: e for c, e in _INERT.items() if c != 0x0A}
# json.dumps escapes C0 itself; what it leaves raw, written as the JSON escape of the same text
_JSON = {c: f"\\u{c:04x}" for c in [0x7F, *range(0x80, 0xA0), *_BIDI]}


def inert(text: str, newlines: bool = False) -> str:
    """`text` with every control character and bidi override shown as an escape: ESC as
    `\\x1b`, U+202E as `\\u202e`. With `newlines`, line breaks are kept (a message of several
    lines, such as DuckDB's error with its caret line)."""
    return text.translate(_INERT_LINES if newlines else _INERT)


def json_inert(text: str) -> str:
    """JSON text (from `json.dumps`) with DEL, C1 controls and bidi overrides written as
    `\\uXXXX` escapes: the same JSON value, and nothing in it acts on a terminal."""
    return text.translate(_JSON)


__all__ = ["inert", "json_inert"]
