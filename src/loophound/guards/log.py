"""The log as the guards replay it: events in time order, what caused what, what each costs
and which finding claims it, read once from a scan's connection (a saved run's or a fresh one).

Time order is event time, ties by file and line (then event id); an event with no time comes
last and is never judged. The links between events (`children`) are those the log states, and
a descendant never comes before its cause:

- `answers`: a response or lifecycle line answers its request;
- `parent_id` → `corr_id` (same format): a hook's child session (its start, its end, the hooks it
  fires), a span's child spans, a reply that names its message;
- `session_start`: the session it starts (the later events of that session, same format);
- a message both ends stored (both sven nodes keep one, with one id) is judged once, as its
  first stored copy (the one attribution counts); the other copy shares its fate;
- a message or room post that names no parent replies to the one before it in its
  conversation when that came from the other party (for a peer message, the party it writes
  to) within `reply_within` (60 s: machine pace).

Everything is numpy arrays over positions, selected and grouped without a Python loop; only
the events a guard must decide one by one become Python `Event`s (`Selection.event`).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from ..attribute import UNIT_KINDS_ALL
from ..db import arrow_numpy, numpy_arrow, one_array
from .machines import FIELDS, Event, machine
from .spec import Guard

NO_TIME = np.iinfo(np.int64).min
# What each guard type reads besides `t`, `kind` and its key and `where` columns.
NEEDS = {
    "breaker": ("ok", "error", "format"), "error_rate": ("ok", "error", "format"),
    "cycle": ("actor", "target"), "isolation": ("actor", "target"), "rate": (),
    "budget": ("tokens", "cost_usd"), "depth": ("depth", "role"), "turns": (),
    "repairs": (), "stuck": ("act", "res", "ok", "error"),
}
STRINGS = ("actor", "target", "session", "channel", "action", "error", "role", "model",
           "format", "file", "event_type", "corr_id", "parent_id", "act", "res", "kind")
_NEW = tuple.__new__
_DEFAULTS = tuple(Event._field_defaults.get(f) for f in FIELDS)


@dataclass
class Column:
    """One column over every position: for text the dictionary codes (`codes` into `values`;
    null is `len(values) - 1`), for numbers a float array (`num`, NaN for null), and the
    Python values (`obj`, made when first asked for)."""

    codes: np.ndarray | None = None
    values: list | None = None
    num: np.ndarray | None = None
    integer: bool = False  # numbers that are whole (depth, tokens)
    _obj: np.ndarray | None = None

    @property
    def obj(self) -> np.ndarray:
        if self._obj is None:
            if self.codes is not None:
                self._obj = np.array(self.values, dtype=object)[self.codes]
            else:
                nan = np.isnan(self.num)
                whole = np.where(nan, 0, self.num).astype(np.int64) if self.integer else None
                self._obj = (whole if self.integer else self.num).astype(object)
                self._obj[nan] = None
        return self._obj

    def code_of(self, value) -> int | None:
        try:
            return self.values.index(value)
        except ValueError:
            return None

    def isin(self, values) -> np.ndarray:
        """Mask of the positions holding one of `values` (text)."""
        table = np.zeros(len(self.values), dtype=bool)
        table[[c for v in values if (c := self.code_of(v)) is not None]] = True
        return table[self.codes]


def _column(col: pa.ChunkedArray, name: str, order: np.ndarray | None = None) -> Column:
    """Column `name` from arrow, its rows taken in `order` (all, as they are, when None)."""
    col = one_array(col)
    if name in STRINGS:
        d = col.dictionary_encode()
        values = d.dictionary.to_pylist() + [None]
        codes = arrow_numpy(d.indices, null=len(values) - 1)
        return Column(codes if order is None else codes[order], values)
    nulls = arrow_numpy(col.is_null())
    filled = arrow_numpy(col, null=False if pa.types.is_boolean(col.type) else 0)
    num = np.where(nulls, np.nan, filled.astype(np.float64))
    if order is not None:
        num, nulls = num[order], nulls[order]
    column = Column(num=num, integer=name in ("depth", "tokens"))
    if name == "ok":
        column._obj = np.array([None, False, True], dtype=object)[
            np.where(nulls, 0, num + 1).astype(np.int64)]
    return column


def _distinct(nodes: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """`nodes` without repeats, in a pass (no sort): `scratch` is an int64 array over
    positions, left dirty."""
    scratch[nodes] = np.arange(len(nodes))
    return nodes[scratch[nodes] == np.arange(len(nodes))]


def _spread(off: np.ndarray, values: np.ndarray, frontier: np.ndarray,
            marked: np.ndarray) -> np.ndarray:
    """Mark in `marked` everything the links (`off`, `values`) lead to from `frontier`, level
    by level, each event once; returns `marked`."""
    scratch = np.empty(len(marked), dtype=np.int64)
    while len(frontier):
        reached = _gather(off, values, frontier)
        frontier = _distinct(reached[~marked[reached]], scratch)
        marked[frontier] = True
    return marked


def _gather(off: np.ndarray, values: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """`values[off[n]:off[n + 1]]` for every node of `nodes`, concatenated."""
    starts = off[nodes]
    counts = off[nodes + 1] - starts
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return values[np.arange(total) + shift]


@dataclass
class Log:
    n: int  # events
    t: np.ndarray  # int64 ms; NO_TIME where an event has none
    kind: Column
    unit: np.ndarray  # bool: an action (request, message, ...) and not a second copy
    cost: np.ndarray  # float64 USD (0 where unpriced)
    tokens: np.ndarray  # int64
    line: np.ndarray  # int64: a number per log line (the position of its first event)
    lines: int  # size of the numbering (not the count of lines)
    nbytes: np.ndarray  # int64
    claimed: np.ndarray  # bool: some finding claims it
    copy: np.ndarray  # bool: a second stored copy of a message (never judged)
    claims: dict[str, np.ndarray]  # finding id → positions it claims (sorted)
    down_off: np.ndarray  # CSR of the links: children of p are down[down_off[p]:down_off[p+1]]
    down: np.ndarray
    up_off: np.ndarray  # and the causes of p
    up: np.ndarray
    columns: dict[str, Column]
    con: duckdb.DuckDBPyConnection
    _children: tuple[list, list] | None = None

    def children(self, pos: int) -> list[int]:
        if self._children is None:
            self._children = (self.down_off.tolist(), self.down.tolist())
        off, down = self._children
        return down[off[pos]:off[pos + 1]]

    def closure(self, positions: np.ndarray) -> np.ndarray:
        """Mask of `positions` and everything they caused (their descendants)."""
        gone = np.zeros(self.n, dtype=bool)
        gone[positions] = True
        return _spread(self.down_off, self.down, np.asarray(positions, dtype=np.int64), gone)

    def reaches(self, mask: np.ndarray) -> np.ndarray:
        """Mask of the events some descendant of which is in `mask`."""
        return _spread(self.up_off, self.up, np.flatnonzero(mask),
                       np.zeros(self.n, dtype=bool))

    def where(self, positions: list[int]) -> list[dict]:
        """File, line and time of a few events (for examples)."""
        if not positions:
            return []
        rows = self.con.execute(
            "SELECT g.pos, e.file, e.line, epoch_ms(e.ts) FROM (SELECT * FROM _guard_ev "
            "WHERE list_contains($p, pos)) g JOIN events e USING (event_id) ORDER BY g.pos",
            {"p": [int(p) for p in positions]}).fetchall()
        return [{"pos": p, "file": f, "line": ln, "t": t} for p, f, ln, t in rows]

    def select(self, guard: Guard) -> Selection:
        """The events `guard` reads (its kinds, or all for a guard that reads every event of
        its key; its `where`), in time order, grouped by key."""
        mask = (self.t != NO_TIME) & ~self.copy
        if not machine(guard).reads_all:
            mask &= self.kind.isin(guard.kinds)
        for column, op, value in guard.where:
            mask &= _test(self.columns[column], op, value)
        pos = np.flatnonzero(mask)
        key = np.zeros(len(pos), dtype=np.int64)
        for column in guard.key:
            codes = self.columns[column].codes[pos].astype(np.int64)
            _, key = np.unique(key * (codes.max(initial=0) + 1) + codes, return_inverse=True)
            key = key.astype(np.int64)
        return Selection(self, guard, pos, key, mask)


def _test(col: Column, op: str, value) -> np.ndarray:
    """The `where` test `op value` over a whole column (as `machines.predicate` per event)."""
    if col.codes is not None:  # text
        if op in ("eq", "ne", "in", "not_in"):
            hit = col.isin([value] if op in ("eq", "ne") else list(value))
            return hit if op in ("eq", "in") else ~hit
        if op == "null":
            return (col.codes == len(col.values) - 1) == value
        return np.zeros(len(col.codes), dtype=bool)  # a text is never < or > a number
    num = col.num
    if op == "null":
        return np.isnan(num) == value
    if op in ("eq", "ne", "in", "not_in"):
        wanted = [value] if op in ("eq", "ne") else list(value)
        numbers = [float(v) for v in wanted if isinstance(v, int | float)]
        hit = np.isin(num, numbers) & ~np.isnan(num)
        if None in wanted:
            hit |= np.isnan(num)
        return hit if op in ("eq", "in") else ~hit
    with np.errstate(invalid="ignore"):
        return {"lt": num < value, "le": num <= value, "gt": num > value,
                "ge": num >= value}[op] & ~np.isnan(num)


@dataclass
class Selection:
    log: Log
    guard: Guard
    pos: np.ndarray  # positions read, in time order
    key: np.ndarray  # a group number per position: the guard's key
    mask: np.ndarray  # over all positions
    _get: list | None = None

    def groups(self) -> list[np.ndarray]:
        """Positions per key, each in time order."""
        if not len(self.pos):
            return []
        order = np.argsort(self.key, kind="stable")
        cuts = np.flatnonzero(np.diff(self.key[order])) + 1
        return np.split(self.pos[order], cuts)

    def _getters(self) -> list:
        """(field index, getter) for the fields read; the others keep their defaults."""
        cols = self.log.columns
        out = [(0, int), (1, lambda p, t=self.log.t: int(t[p])),
               (2, self.log.kind.obj.__getitem__)]
        for i, f in enumerate(FIELDS):
            if f in cols:
                out.append((i, cols[f].obj.__getitem__))
            elif f == "parents" and self.guard.type == "depth":
                out.append((i, self._parents))
        return out

    def _parents(self, p: int) -> tuple[int, ...]:
        log = self.log
        return tuple(log.up[log.up_off[p]:log.up_off[p + 1]].tolist())

    def event(self, pos: int) -> Event:
        if self._get is None:
            self._get = self._getters()
        row = list(_DEFAULTS)
        for i, get in self._get:
            row[i] = get(pos)
        return _NEW(Event, row)

    def events(self) -> list[Event]:
        """Every selected event as an `Event`, in time order."""
        p = self.pos
        cols = self.log.columns
        data = []
        for f in FIELDS:
            if f == "pos":
                data.append(p.tolist())
            elif f == "t":
                data.append(self.log.t[p].tolist())
            elif f == "kind":
                data.append(self.log.kind.obj[p].tolist())
            elif f in cols:
                data.append(cols[f].obj[p].tolist())
            elif f == "parents":
                data.append([self._parents(int(x)) for x in p])
            else:
                data.append([Event._field_defaults.get(f)] * len(p))
        return [_NEW(Event, row) for row in zip(*data, strict=True)]


def _needs(guards: list[Guard]) -> set[str]:
    fields = set()
    for g in guards:
        fields |= set(NEEDS[g.type]) | set(g.key) | {c for c, _, _ in g.where}
    return fields - {"kind"}


EXPRESSIONS = {"act": "coalesce(e.action_key, e.action)", "res": "e.result_key",
               "tokens": "coalesce(f.tokens, 0)", "cost_usd": "coalesce(f.cost_usd, 0)"}


def _has(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute(
        "SELECT count(*) FROM (SELECT table_name AS n FROM duckdb_tables() UNION ALL "
        "SELECT view_name FROM duckdb_views()) WHERE n = ?", [name]).fetchall()[0][0])


def load(con: duckdb.DuckDBPyConnection, guards: list[Guard], reply_within_s: float = 60.0) -> Log:
    """Read the events, their links, costs and claims from `con`, which holds a scan's views
    (`events`; claims in `claims` or `finding_events`; costs in `_attribution`, a saved run's,
    or `_event_facts`, a scan's), with the columns `guards` read. A position is an event's
    place in time order; the registered table `_guard_ev` maps positions to event ids."""
    costs = "_attribution" if _has(con, "_attribution") else "_event_facts"
    fields = sorted(_needs(guards) - {"tokens", "cost_usd"})
    extra = "".join(f", {EXPRESSIONS.get(c, 'e.' + c)} AS {c}" for c in fields)
    # read as stored, then put in time order here: a sort in numpy of four integer keys is
    # cheaper than DuckDB's of the rows with their text
    table = con.sql(f"""SELECT e.event_id, epoch_ms(e.ts) AS t, e.kind, e.line,
        e.byte_length, e.answers, {EXPRESSIONS['tokens']} AS tokens,
        {EXPRESSIONS['cost_usd']} AS cost_usd {extra}
        FROM events e LEFT JOIN {costs} f USING (event_id)""").to_arrow_table()
    n = table.num_rows
    stored_ids = arrow_numpy(table["event_id"]).astype(np.int64)
    t_stored = arrow_numpy(table["t"], null=NO_TIME).astype(np.int64)
    stored_line = arrow_numpy(table["line"])
    # an input is one file: its events' file names ranked through their input numbers
    inputs = con.execute("SELECT DISTINCT event_id >> 32, file FROM events").fetchall()
    ranked = sorted(inputs, key=lambda r: (r[1] is None, r[1] or "", r[0]))
    number = np.array([r[0] for r in ranked], dtype=np.int64)
    by_input = np.argsort(number)
    input_of = stored_ids >> 32
    rank = by_input[np.searchsorted(number[by_input], input_of)]
    order = np.lexsort((stored_ids, stored_line, rank,
                        np.where(t_stored == NO_TIME, np.iinfo(np.int64).max, t_stored)))
    ids = stored_ids[order]
    by_id = np.argsort(ids, kind="stable")
    sorted_ids = ids[by_id]

    def positions(event_ids) -> np.ndarray:
        return by_id[np.searchsorted(sorted_ids, np.asarray(event_ids, dtype=np.int64))]

    con.register("_guard_ev", pa.table({"pos": numpy_arrow(np.arange(n, dtype=np.int64)),
                                        "event_id": numpy_arrow(ids)}))
    t = t_stored[order]
    kind = _column(table["kind"], "kind", order)
    # a message both ends stored: the copies after the first stored (lowest event id, as
    # attribution counts them) are not actions and are not judged
    copies = con.sql("""SELECT g.pos, f.pos AS first FROM (
        SELECT event_id, min(event_id) OVER (PARTITION BY format, kind, corr_id) AS canon
        FROM messages WHERE corr_id IS NOT NULL) c
        JOIN _guard_ev g USING (event_id) JOIN _guard_ev f ON f.event_id = c.canon
        WHERE c.event_id <> c.canon""").to_arrow_table()
    copy_pos = arrow_numpy(copies["pos"]).astype(np.int64)
    copy = np.zeros(n, dtype=bool)
    copy[copy_pos] = True
    unit = kind.isin(UNIT_KINDS_ALL) & ~copy
    # a log line per position: its own, but one for the several events of an OTLP line
    # (their ids are not input × 2^32 + line)
    line = np.arange(n, dtype=np.int64)
    if ((stored_ids & 0xFFFFFFFF) != stored_line).any():
        shared = con.sql("""SELECT g.pos, min(g.pos) OVER (PARTITION BY e.event_id >> 32,
            e.line) AS first FROM events e JOIN _guard_ev g USING (event_id)
            WHERE e.event_id & 4294967295 <> e.line""").fetchnumpy()
        line[np.asarray(shared["pos"], dtype=np.int64)] = np.asarray(shared["first"],
                                                                       dtype=np.int64)
    claims_t = con.sql("SELECT finding_id, event_id FROM "
                       + ("claims" if _has(con, "claims") else "finding_events")).to_arrow_table()
    claims: dict[str, np.ndarray] = {}
    claimed = np.zeros(n, dtype=bool)
    if claims_t.num_rows:
        fid = _column(claims_t["finding_id"], "kind")  # text: dictionary codes
        pos = positions(arrow_numpy(claims_t["event_id"]))
        claimed[pos] = True
        by = np.lexsort((pos, fid.codes))
        codes, pos = fid.codes[by], pos[by]
        cuts = np.flatnonzero(np.diff(codes)) + 1
        for chunk_c, chunk_p in zip(np.split(codes, cuts), np.split(pos, cuts), strict=True):
            claims[fid.values[chunk_c[0]]] = chunk_p
    answers = table["answers"]
    has = ~arrow_numpy(answers.is_null())[order]
    answered = positions(arrow_numpy(answers, null=0)[order][has])
    parent, child = _links(con, reply_within_s)
    parent = np.concatenate([parent, answered])
    child = np.concatenate([child, np.flatnonzero(has)])
    keep = parent < child  # an effect never comes before its cause, but a copy may
    parent = np.concatenate([parent[keep], arrow_numpy(copies["first"]).astype(np.int64)])
    child = np.concatenate([child[keep], copy_pos])
    down_off, down = _csr(parent, child, n)
    up_off, up = _csr(child, parent, n)
    columns = {c: _column(table[c], c, order) for c in (*fields, "tokens", "cost_usd")}
    return Log(n, t, kind, unit, columns["cost_usd"].num, columns["tokens"].num.astype(np.int64),
               line, n, arrow_numpy(table["byte_length"]).astype(np.int64)[order],
               claimed, copy, claims, down_off, down, up_off, up, columns, con)


def _csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Links as compressed rows: `dst[off[p]:off[p + 1]]` are the links from `p` (a link
    stated twice is there twice: following it twice changes nothing)."""
    order = np.argsort(src, kind="stable")
    return np.searchsorted(src[order], np.arange(n + 1)).astype(np.int64), dst[order]


def _links(con: duckdb.DuckDBPyConnection, reply_within_s: float) -> tuple[np.ndarray, ...]:
    """(cause, effect) positions of the links other than `answers` and copies (see the module
    docstring; a link backwards in time is dropped by the caller)."""
    edges = con.sql("""
        WITH named AS (SELECT g.pos, e.parent_id, e.format FROM events e
                       JOIN _guard_ev g USING (event_id) WHERE e.parent_id IS NOT NULL),
        causes AS (SELECT g.pos, e.corr_id, e.format FROM events e
                   JOIN _guard_ev g USING (event_id)
                   WHERE e.corr_id IN (SELECT parent_id FROM named)),
        starts AS (SELECT g.pos, e.session, e.format FROM events e
                   JOIN _guard_ev g USING (event_id)
                   WHERE e.kind = 'session_start' AND e.session IS NOT NULL),
        sessions AS (SELECT g.pos, e.session, e.format FROM events e
                     JOIN _guard_ev g USING (event_id)
                     WHERE e.session IN (SELECT session FROM starts)),
        msgs AS (SELECT * FROM (
                   SELECT g.pos, e.kind, e.actor, e.target, e.session, e.parent_id, e.ts,
                          e.corr_id, e.event_id,
                          min(e.event_id) OVER (PARTITION BY e.kind, e.corr_id) AS canon
                   FROM messages e JOIN _guard_ev g USING (event_id))
                 WHERE corr_id IS NULL OR event_id = canon)
        SELECT p.pos AS parent, c.pos AS child FROM named c
          JOIN causes p ON p.corr_id = c.parent_id AND p.format = c.format
        UNION ALL
        SELECT s.pos, c.pos FROM starts s
          JOIN sessions c ON c.session = s.session AND c.format = s.format
        UNION ALL
        SELECT prev, pos FROM (
          SELECT pos, kind, actor, ts, lag(pos) OVER w AS prev, lag(actor) OVER w AS prev_actor,
                 lag(target) OVER w AS prev_target, lag(ts) OVER w AS prev_ts
          FROM msgs WHERE parent_id IS NULL AND session IS NOT NULL AND ts IS NOT NULL
          WINDOW w AS (PARTITION BY session ORDER BY pos))
        WHERE prev IS NOT NULL AND prev_actor IS DISTINCT FROM actor
          AND (kind = 'room_post' OR prev_target = actor)
          AND epoch_ms(ts) - epoch_ms(prev_ts) <= $ms
        """, params={"ms": int(reply_within_s * 1000)}).to_arrow_table()
    return (arrow_numpy(edges["parent"]).astype(np.int64),
            arrow_numpy(edges["child"]).astype(np.int64))
