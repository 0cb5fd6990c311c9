"""Post-completion hook dispatcher history (the orchestrator of seed 002): JSONL from Python's
`json.dumps`, one `session_started` / `session_completed` / `hook_fired` object per line.

Columns:
- `hook_fired` ⇒ kind `trigger`: actor = `source_agent` (whose completion fired the hook),
  target = `target_agent` (the agent the hook starts), action = the `hook` name, else `hook`.
- `session_started` ⇒ `session_start`, `session_completed` ⇒ `session_end`: actor = the agent
  running the session. The reference documents two shapes for session events: one with
  `target_agent` = the agent running the session and `source_agent` = what started it (`cron`,
  `user:<name>`, an agent), one with only `source_agent` = the agent running the session. So
  actor = `target_agent` when present, else `source_agent`; target is NULL (a session acts on
  nothing; who started it is the lineage, `parent_id`). `source_agent` and `target_agent` are
  also kept in `extra`, so the starter of a session is never lost. action = the `hook` name,
  else `session`.
- cost_usd = `cost_usd` (only `session_completed` carries it; absent stays NULL).
- session = `session_id`, corr_id = `completion_id`, parent_id = `parent_completion_id`,
  depth = `hook_origin_depth`, channel `hook`, ts = `ts` (ISO-8601 with offset, in UTC).

A loop shows as a lineage: `hook_fired.corr_id` = the next `session_start.parent_id`.
"""

from __future__ import annotations

from pathlib import Path

from .base import Format, FormatContext, extra_json, iso_to_ts, json_fields, sql_str, struct_spec

FIELDS = {
    "ts": "VARCHAR", "event": "VARCHAR", "completion_id": "VARCHAR", "session_id": "VARCHAR",
    "parent_completion_id": "VARCHAR", "hook_origin_depth": "JSON", "cost_usd": "JSON",
    "hook": "VARCHAR",
}
# Read for actor/target, and kept in `extra` too (the starter of a session lives there).
KNOWN = {"source_agent", "target_agent"}
EVENTS = {"hook_fired": "trigger", "session_started": "session_start",
          "session_completed": "session_end"}


def sniff(records: list[dict], path: Path) -> bool:
    hits = sum(1 for r in records if isinstance(r.get("event"), str) and r["event"] in EVENTS
               and ("source_agent" in r or "target_agent" in r) and "ts" in r)
    return hits > 0 and hits * 2 > len(records)


def select_sql(ctx: FormatContext) -> str:
    kinds = " ".join(f"WHEN {sql_str(k)} THEN {sql_str(v)}" for k, v in EVENTS.items())
    source, target = "(r.source_agent->>'$')", "(r.target_agent->>'$')"
    return f"""
    SELECT line, byte_offset, byte_length, text,
      {iso_to_ts("r.ts")} AS ts,
      CASE r.event {kinds} ELSE 'record' END AS kind,
      r.event AS event_type,
      CASE WHEN r.event = 'hook_fired' THEN {source}
           ELSE coalesce({target}, {source}) END AS actor,
      CASE WHEN r.event = 'hook_fired' THEN {target} END AS target,
      r.session_id AS session, 'hook' AS channel,
      coalesce(r.hook, CASE WHEN r.event = 'hook_fired' THEN 'hook' ELSE 'session' END) AS action,
      TRY_CAST(TRY_CAST(r.hook_origin_depth->>'$' AS DOUBLE) AS INTEGER) AS depth,
      r.completion_id AS corr_id, r.parent_completion_id AS parent_id,
      TRY_CAST(r.cost_usd->>'$' AS DOUBLE) AS cost_usd,
      {extra_json(KNOWN)} AS extra
    FROM (SELECT *, from_json(text, {struct_spec(FIELDS | json_fields(KNOWN))}) AS r FROM raw)
    """


FORMAT = Format(
    name="hooks",
    description="post-completion hook dispatcher history (hook_fired, session_started/completed)",
    sniff=sniff,
    select_sql=select_sql,
    mapped_keys=frozenset(FIELDS),
    known_keys=frozenset(KNOWN),
    priority=40,
    groupable=True,
)
