"""One module per self-contained part of the report; each renders HTML from the model only.

Order of the page: header (the sentence, key figures, cost basis), what could be
judged (coverage), timeline, attribution,
one panel per finding, what would have stopped it (a guard replay, when asked for), tables
(top talkers, error codes, cost by actor and model), method.
"""

from __future__ import annotations

from . import attribution, coverage, findings, guards, header, method, tables, timeline

SECTIONS = (header, coverage, timeline, attribution, findings, guards, tables, method)

__all__ = ["SECTIONS"]
