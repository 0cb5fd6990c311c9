"""runaway_subagents: a session whose sub-agents run away, in number or in depth.

An agent that delegates starts a sub-agent: a Claude Code `Task` (`Agent`) call, whose
subagent's lines name it (`agent-<id>`: the call's result states the id, a relayed line
the call), or an agent span invoked under another agent's span (OpenTelemetry
`invoke_agent`, `depth` ≥ 1: the agents above it). Delegation is healthy when each sub-agent
has a task of its own: 3 sub-agents for explore, plan and review, 12 for 12 modules. It runs
away when the same task is handed out again and again (the agent re-spawning a sub-agent
that keeps failing, each one paying for its whole context again), or when sub-agents start
sub-agents without end (a planner invoking a planner, 40 levels deep). Every spawn is
measured, not only the failing ones: a sub-agent that "succeeds" with the same non-answer is
respawned just the same.

For each session, spawns are split into episodes at a pause of `max_gap_s`; in an episode:
- repeats: the most spawns of one task (the same call: `action_key`, the call's name and
  input after masking, without the model's `description`; spans that state no arguments
  have no task to compare, and count only in number and depth);
- depth: the deepest spawn (a Task started by a subagent is one deeper than that subagent's;
  a span's depth is the agents above it);
- spawns: how many.

Judge: the highest of three severities: repeats from `min_repeats` (medium), `high_repeats`,
`critical_repeats`; depth from `deep` (medium), `high_depth`, `critical_depth`; a fan-out of
`many_spawns` distinct spawns or more is medium at most (a batch over many items is work,
but one a person should see). What the finding claims is the whole spawn tree: the spawns
and every event of the sub-agents they started in the session, so attribution prices
the sub-agents' model calls with the spawns.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field

import duckdb

from ..vocabulary import Severity
from .actions import clip
from .base import Detector, EvidenceLine, Finding, human_duration, param, staged

SPAWN_KINDS = ("tool_call", "request")


@dataclass
class Params:
    spawn_tools: tuple[str, ...] = param(("Task", "Agent"), "tool calls that start a sub-agent "
                                                            "(Claude Code's Task, renamed Agent)")
    min_repeats: int = param(5, "spawns of one task in an episode that make a finding medium")
    high_repeats: int = param(15, "spawns of one task that make it high")
    critical_repeats: int = param(100, "spawns of one task that make it critical")
    deep: int = param(4, "sub-agent depth (agents above the deepest spawn) that makes a finding "
                         "medium")
    high_depth: int = param(8, "sub-agent depth that makes it high")
    critical_depth: int = param(50, "sub-agent depth that makes it critical")
    many_spawns: int = param(50, "spawns in an episode that make a fan-out of distinct tasks a "
                                 "(medium) finding")
    max_gap_s: float = param(3600.0, "a longer pause between two spawns of a session starts a new "
                                     "episode")


# Every spawn: one scan per kind, each filtered where it is read (a log of millions of
# requests and no agent span pays for reading their `depth` and `action` only)
SPAWNS_SQL = """
SELECT event_id, ts, file, line, session, actor, kind, corr_id, target, action_key, args,
       action, depth
FROM events
WHERE kind = 'tool_call' AND list_contains($tools, action)
  AND session IS NOT NULL AND ts IS NOT NULL AND actor IS NOT NULL
UNION ALL
SELECT event_id, ts, file, line, session, actor, kind, corr_id, target, action_key, args,
       action, depth
FROM events
WHERE kind = 'request' AND depth >= 1 AND starts_with(action, 'invoke_agent ')
  AND session IS NOT NULL AND ts IS NOT NULL AND actor IS NOT NULL
"""

# The spawns (`_spawns`) with the sub-agent each started: a Task's result names it, else a
# line it relayed names the Task; an agent span's is the agent it invokes. Only the sessions
# with spawns are read for those.
CHILDREN_SQL = """
WITH answered AS (
  SELECT answers, any_value(json_extract_string(extra, '$.spawned')) AS spawned
  FROM events
  WHERE kind = 'response' AND answers IN (SELECT event_id FROM _spawns)
    AND extra LIKE '%"spawned"%'
  GROUP BY answers
), relayed AS (
  SELECT json_extract_string(extra, '$.spawned_by') AS call, any_value(actor) AS actor
  FROM events
  WHERE session IN (SELECT DISTINCT session FROM _spawns) AND extra LIKE '%"spawned_by"%'
  GROUP BY 1
)
SELECT s.event_id, s.ts, s.file, s.line, s.session, s.actor,
  CASE WHEN s.kind = 'tool_call' THEN coalesce('agent-' || a.spawned, r.actor) ELSE s.target END
    AS child,
  CASE WHEN s.kind = 'tool_call' OR s.args IS NOT NULL THEN s.action_key END AS task,
  coalesce(s.args, s.action) AS what, s.action,
  CASE WHEN s.kind = 'request' THEN s.depth END AS depth
FROM _spawns s
LEFT JOIN answered a ON a.answers = s.event_id
LEFT JOIN relayed r ON r.call = s.corr_id AND s.kind = 'tool_call'
ORDER BY s.session, s.ts, s.file, s.line, s.event_id
"""

# the last event of the sub-agents a spawn tree started, in its session
UNTIL_SQL = """
SELECT max(ts) FROM events
WHERE session = $session AND list_contains($children, actor) AND ts >= $start
"""

# the spawns, and every event of the sub-agents they started in the session
CLAIM = """
SELECT CAST(unnest($ids) AS BIGINT) AS event_id
UNION
SELECT event_id FROM events
WHERE session = $session AND list_contains($children, actor) AND ts BETWEEN $start AND $stop
"""


@dataclass(frozen=True)
class Spawn:
    event_id: int
    ts: dt.datetime
    file: str
    line: int
    actor: str
    child: str | None
    task: str | None
    what: str | None
    action: str
    depth: int


@dataclass
class Tree:
    """The spawns of one episode of a session, and what they add up to."""

    session: str
    spawns: list[Spawn]
    repeats: int = 0  # spawns of the most repeated task
    task: Spawn | None = None  # the first spawn of that task
    again: Spawn | None = None  # its second spawn
    deepest: Spawn | None = None
    tasks: int = 0  # distinct tasks (spawns without one count each)
    stop: dt.datetime | None = None  # the last event of its sub-agents
    children: list[str] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return self.deepest.depth if self.deepest else 0

    @property
    def start(self) -> dt.datetime:
        return self.spawns[0].ts


# ---------------------------------------------------------------------------------------------
# measure


def depths(rows: list[tuple]) -> list[int]:
    """Each spawn's depth: the one its row states (a span's agents above it), else one deeper
    than the agent that made it, where that agent was itself started by an earlier spawn
    (rows: (actor, child, stated depth) in time order)."""
    of: dict[str, int] = {}
    out = []
    for actor, child, stated in rows:
        d = stated if stated is not None else of.get(actor, 0) + 1
        if child is not None:
            of.setdefault(child, d)
        out.append(d)
    return out


def episodes(spawns: list[Spawn], max_gap_s: float) -> list[list[Spawn]]:
    """A session's spawns split where two are more than `max_gap_s` apart."""
    out: list[list[Spawn]] = []
    for s in spawns:
        if out and (s.ts - out[-1][-1].ts).total_seconds() <= max_gap_s:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def tree_of(session: str, spawns: list[Spawn]) -> Tree:
    """What one episode's spawns add up to."""
    tree = Tree(session, spawns)
    counted = Counter(s.task for s in spawns if s.task is not None)
    tree.tasks = len(counted) + sum(1 for s in spawns if s.task is None)
    if counted:
        top, tree.repeats = max(counted.items(), key=lambda kv: (kv[1], -_first(spawns, kv[0])))
        same = [s for s in spawns if s.task == top]
        tree.task, tree.again = same[0], same[1] if len(same) > 1 else None
    tree.deepest = max(spawns, key=lambda s: (s.depth, -s.event_id))
    tree.children = sorted({s.child for s in spawns if s.child})
    return tree


def _first(spawns: list[Spawn], task: str) -> int:
    return next(i for i, s in enumerate(spawns) if s.task == task)


def could_be(t: Tree, p: Params) -> bool:
    return t.repeats >= p.min_repeats or t.depth >= p.deep or len(t.spawns) >= p.many_spawns


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[Tree]:
    con.execute(f"CREATE OR REPLACE TEMP TABLE _spawns AS {SPAWNS_SQL}",
                {"tools": list(p.spawn_tools)})
    if not con.execute("SELECT count(*) FROM _spawns").fetchall()[0][0]:
        return []
    rows = con.execute(CHILDREN_SQL).fetchall()
    by_session: dict[str, list[tuple]] = {}
    for r in rows:
        by_session.setdefault(r[4], []).append(r)
    trees = []
    for session, srows in by_session.items():
        ds = depths([(r[5], r[6], r[10]) for r in srows])
        spawns = [Spawn(r[0], r[1], r[2], r[3], r[5], r[6], r[7], r[8], r[9], d)
                  for r, d in zip(srows, ds, strict=True)]
        for ep in episodes(spawns, p.max_gap_s):
            tree = tree_of(session, ep)
            if could_be(tree, p):
                tree.stop = con.execute(UNTIL_SQL, {"session": session, "children": tree.children,
                                                    "start": tree.start}).fetchall()[0][0]
                trees.append(tree)
    return trees


# ---------------------------------------------------------------------------------------------
# judge


def _level(value: int, medium: int, high: int, critical: int) -> Severity | None:
    for level, at in ((Severity.CRITICAL, critical), (Severity.HIGH, high), (Severity.MEDIUM, medium)):
        if value >= at:
            return level
    return None


def judge(t: Tree, p: Params) -> Severity | None:
    levels = [_level(t.repeats, p.min_repeats, p.high_repeats, p.critical_repeats),
              _level(t.depth, p.deep, p.high_depth, p.critical_depth),
              Severity.MEDIUM if len(t.spawns) >= p.many_spawns else None]
    found = [s for s in levels if s is not None]
    return max(found, key=lambda s: s.rank) if found else None


# ---------------------------------------------------------------------------------------------
# describe


def describe(t: Tree, severity: Severity, p: Params) -> Finding:
    n = len(t.spawns)
    stop = max(t.stop or t.spawns[-1].ts, t.spawns[-1].ts)
    spawners = sorted({s.actor for s in t.spawns})
    why = []
    if t.repeats >= p.min_repeats and t.task:
        why.append(f"{t.repeats:,} of them for the same task (`{t.task.action}` "
                   f"{clip(t.task.what, 100)!r})")
    if t.depth >= p.deep:
        why.append(f"nested {t.depth:,} deep (sub-agents starting sub-agents)")
    if not why:
        why.append(f"{t.tasks:,} distinct tasks")
    title = f"session {t.session}: {n:,} sub-agents started, " + ", ".join(why)
    summary = (f"{', '.join(spawners)} started {n:,} sub-agent{'s' if n > 1 else ''} in session "
               f"{t.session} over {human_duration((t.spawns[-1].ts - t.start).total_seconds())} "
               f"({t.tasks:,} distinct task{'s' if t.tasks != 1 else ''}, deepest {t.depth:,}): "
               + "; ".join(why) + ". A sub-agent starts from a fresh context each time and pays "
               "for it again; the finding claims every spawn and every event of the sub-agents "
               "they started, so its cost is the whole spawn tree's.")
    evidence = [EvidenceLine(t.spawns[0].file, t.spawns[0].line, "the first sub-agent started")]
    if t.again is not None and t.repeats >= p.min_repeats:
        evidence.append(EvidenceLine(t.again.file, t.again.line,
                                     f"the same task handed out again ({t.repeats:,} times in all)"))
    if t.deepest is not None and t.depth >= p.deep:
        evidence.append(EvidenceLine(t.deepest.file, t.deepest.line,
                                     f"the deepest sub-agent, {t.depth:,} below the first agent"))
    return Finding(
        detector="runaway_subagents",
        key=f"{t.session}|{t.start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        signal=f"{n:,} sub-agents started ({t.repeats:,} for one task, {t.depth:,} deep)",
        recommendation=_recommendation(p),
        start=t.start, end=stop,
        actors=spawners, targets=t.children[:20], sessions=[t.session],
        claim_sql=CLAIM,
        claim_params={"ids": [s.event_id for s in t.spawns], "session": t.session,
                      "children": t.children, "start": t.start, "stop": stop},
        unit_kinds=SPAWN_KINDS,
        details={"spawns": n, "distinct_tasks": t.tasks, "most_repeated_task": t.repeats,
                 "task": clip(t.task.what, 400) if t.task else None,
                 "depth": t.depth, "sub_agents": len(t.children),
                 "duration_s": (t.spawns[-1].ts - t.start).total_seconds()},
        evidence=evidence,
    )


def _recommendation(p: Params) -> str:
    return (f"Cap delegation: refuse the {p.min_repeats}th sub-agent for the same task in a "
            f"session (a PreToolUse hook on Task in Claude Code that counts identical prompts "
            f"and blocks with exit code 2), and have the agent do the work itself, or stop, "
            f"when a sub-agent came back without it; limit nesting (a depth passed down with each "
            f"invocation, refused past {p.deep - 1}: LangGraph's recursion_limit, the OpenAI "
            f"Agents SDK's max_turns per run) and give each session a budget for its sub-agents' "
            f"tokens.")


DETECTOR = Detector(
    name="runaway_subagents",
    description="a session starting sub-agents without end: the same task handed out again "
                "and again, or sub-agents nested deeper and deeper (Claude Code Task calls, "
                "agent spans under agent spans); the cost of the whole spawn tree",
    params=Params,
    run=staged(measure, judge, describe),
    rank=20,
    reads=SPAWN_KINDS,
    needs=(("ts",), ("session",), ("action",)),
    partition_by=("session",),
)
