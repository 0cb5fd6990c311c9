"""Hook triggers chained into lineage trees, shared by trigger_cycle and depth_violation.

A hop is one trigger from a source agent to a target agent; a hop's parent is the hop that
started the session it was fired from (parent completion ids), or, for logs that carry no
lineage ids, the latest hop into its source within a time window.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import duckdb

HOPS_SQL = """
SELECT event_id, ts, file, line, actor AS source, target, session, corr_id, parent_id, depth
FROM triggers
WHERE kind = 'trigger' AND ts IS NOT NULL AND actor IS NOT NULL AND target IS NOT NULL
ORDER BY ts, file, line, event_id
"""

SESSIONS_SQL = """
SELECT session,
  coalesce(arg_min(actor, ts) FILTER (WHERE kind = 'session_start'),
           arg_min(actor, ts) FILTER (WHERE kind = 'session_end')) AS agent,
  min(ts) FILTER (WHERE kind = 'session_start') AS started,
  max(ts) FILTER (WHERE kind = 'session_end') AS ended,
  coalesce(arg_min(parent_id, ts) FILTER (WHERE kind = 'session_start'),
           arg_min(parent_id, ts) FILTER (WHERE kind = 'session_end')) AS parent_completion,
  arg_min(corr_id, ts) FILTER (WHERE kind = 'session_end') AS completion,
  sum(cost_usd) FILTER (WHERE kind = 'session_end') AS cost_usd,
  arg_min(depth, ts) FILTER (WHERE kind = 'session_start') AS depth,
  arg_min(CASE WHEN extra LIKE '%"source_agent"%'
               THEN json_extract_string(extra, '$.source_agent') END, ts)
    FILTER (WHERE kind = 'session_start') AS started_by,
  arg_min(struct_pack(file := file, line := line), ts)
    FILTER (WHERE kind = 'session_start') AS start_at,
  arg_max(ts, ts) AS last_ts
FROM triggers
WHERE session IS NOT NULL AND kind IN ('session_start', 'session_end') AND ts IS NOT NULL
GROUP BY session
"""

# Detector.links of what reads lineages: the agents, sessions and completion ids by which
# hops and sessions are chained
LINKS_SQL = """
SELECT format, 'agent' || chr(31) || agent
FROM (SELECT format, unnest([actor, target]) AS agent FROM triggers) WHERE agent IS NOT NULL
UNION ALL
SELECT format, 'session' || chr(31) || session FROM triggers WHERE session IS NOT NULL
UNION ALL
SELECT format, 'completion' || chr(31) || completion
FROM (SELECT format, unnest([corr_id, parent_id]) AS completion FROM triggers)
WHERE completion IS NOT NULL
"""

CLAIM = """
SELECT event_id FROM triggers
WHERE session IN (SELECT unnest(CAST($sessions AS VARCHAR[])))
UNION ALL
SELECT unnest(CAST($hops AS BIGINT[])) AS event_id
"""


@dataclass
class Lineage:
    """Hops chained by lineage (or by time), with the sessions they started."""

    hops: list[dict[str, Any]]
    sessions: dict[str, dict[str, Any]]
    parent: dict[int, int | None]  # hop index → parent hop index
    child_session: dict[int, str | None]  # hop index → the session it started
    linked_by: dict[int, str] = field(default_factory=dict)  # hop index → 'lineage' | 'time'

    def roots(self) -> list[int]:
        return [i for i in range(len(self.hops)) if self.parent.get(i) is None]

    def children(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = defaultdict(list)
        for i, p in self.parent.items():
            if p is not None:
                out[p].append(i)
        return out

    def paths(self, root: int, children: dict[int, list[int]], limit: int) -> tuple[list[list[int]], bool]:
        """Root-to-leaf hop paths of one lineage tree (iterative; at most `limit`)."""
        out: list[list[int]] = []
        stack: list[list[int]] = [[root]]
        while stack:
            path = stack.pop()
            kids = children.get(path[-1], [])
            if not kids:
                out.append(path)
                if len(out) >= limit:
                    return out, True
                continue
            if len(kids) == 1:  # follow a linear chain without copying at every step
                nxt = path
                while len(kids) == 1:
                    nxt.append(kids[0])
                    kids = children.get(kids[0], [])
                stack.append(nxt)
                continue
            for k in reversed(kids):
                stack.append(path + [k])
        return out, False

    def agents_and_sessions(self, path: list[int]) -> tuple[list[str], list[str | None]]:
        """Agent i ran session i; hop i goes from agent i to agent i + 1."""
        hops = self.hops
        agents = [hops[path[0]]["source"]] + [hops[i]["target"] for i in path]
        sess: list[str | None] = [hops[path[0]]["session"]]
        for n, i in enumerate(path):
            nxt = hops[path[n + 1]]["session"] if n + 1 < len(path) else None
            sess.append(nxt or self.child_session.get(i))
        return agents, sess


def load_lineage(con: duckdb.DuckDBPyConnection, window_s: float) -> Lineage:
    hop_rows = con.execute(HOPS_SQL).fetchall()
    cols = [d[0] for d in con.description]
    hops = [dict(zip(cols, r, strict=True)) for r in hop_rows]
    sessions: dict[str, dict[str, Any]] = {}
    if hops:
        srows = con.execute(SESSIONS_SQL).fetchall()
        scols = [d[0] for d in con.description]
        sessions = {r[0]: dict(zip(scols, r, strict=True)) for r in srows}
    # the session each hop started: parent completion = the hop's completion, agent = its target
    started: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for s in sessions.values():
        if s["parent_completion"] is not None and s["agent"] is not None:
            started[(s["parent_completion"], s["agent"])].append(s)
    by_completion: dict[tuple[str, str], int] = {}
    for i, h in enumerate(hops):
        if h["corr_id"] is not None:
            by_completion.setdefault((h["corr_id"], h["target"]), i)
    parent: dict[int, int | None] = {}
    child_session: dict[int, str | None] = {}
    linked_by: dict[int, str] = {}
    open_into: dict[str, list[int]] = defaultdict(list)  # agent → id-less hops into it, by time
    window = dt.timedelta(seconds=window_s)
    for i, h in enumerate(hops):
        cands = started.get((h["corr_id"], h["target"]), []) if h["corr_id"] is not None else []
        cands = [s for s in cands if s["started"] is None or s["started"] >= h["ts"] - window]
        child_session[i] = min(cands, key=lambda s: (s["started"] or h["ts"], s["session"]))["session"] \
            if cands else None
        pc = h["parent_id"]
        if pc is None and h["session"] in sessions:
            pc = sessions[h["session"]]["parent_completion"]
        p = by_completion.get((pc, h["source"])) if pc is not None else None
        if p is not None and p != i:
            parent[i], linked_by[i] = p, "lineage"
            continue
        parent[i] = None
        if h["corr_id"] is None and pc is None and h["session"] is None:
            # no lineage ids at all: follow the most recent hop into this source within the window
            prev = open_into.get(h["source"], [])
            while prev and h["ts"] - hops[prev[-1]]["ts"] > window:
                prev.pop()
            if prev:
                parent[i], linked_by[i] = prev.pop(), "time"
            open_into[h["target"]].append(i)  # hops come in time order: the list stays sorted
    return Lineage(hops, sessions, parent, child_session, linked_by)
