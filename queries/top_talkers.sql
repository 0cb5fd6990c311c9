-- title: Top talkers
-- description: The actors that did the most: requests sent, messages and room posts written,
--   hooks fired, LLM calls and steps made, each counted once (responses, lifecycle lines and
--   session ends are not counted, and a message both parties stored is one), with their
--   errors, reach and pace, the log bytes of every line that names them (responses and
--   lifecycle lines included), their tokens and what they cost (`event_costs`).
-- param: limit = 20  -- rows to return
-- param: file: str = null  -- only this input file (default: every file)
-- param: no_actor = false  -- also list the lines that name no actor, as one row with no actor
-- the messages' ids, read whole before they are filtered: DuckDB tries `corr_id IS NOT NULL`
-- on every event's id before their kind, where no event is a message (0.02 s at 1.27 M events)
WITH message_ids AS MATERIALIZED (SELECT event_id, format, kind, corr_id FROM messages),
copies AS (  -- a message both parties stored (same format, kind and id): the copies after the first
  SELECT event_id FROM message_ids WHERE corr_id IS NOT NULL
  QUALIFY event_id <> min(event_id) OVER (PARTITION BY format, kind, corr_id)
),
lines AS (
  SELECT e.actor, e.target, e.session, e.kind, e.format, e.ts, e.byte_length,
         e.error IS NOT NULL OR e.ok = false AS failed, c.tokens, c.cost_usd,
         -- an action: a line of these kinds, and not a message's second copy
         e.kind IN ('request', 'message', 'room_post', 'session_start', 'step', 'llm_call',
                    'repair_attempt', 'record', 'connection', 'config', 'trigger', 'audit',
                    'tool_call')
           AND cp.event_id IS NULL AS act
  FROM events e
  LEFT JOIN copies cp USING (event_id)
  LEFT JOIN event_costs c USING (event_id)
  WHERE ($file IS NULL OR e.file = $file) AND (e.actor IS NOT NULL OR $no_actor)
),
-- the lines counted by what the figures below tell apart (target, session, kind, format, an
-- action or not, failed or not): a few rows per actor, which the distinct counts and the
-- most frequent values read instead of every line; dollars summed as decimals, the same to
-- the last digit whatever order the rows come in
grouped AS MATERIALIZED (
  SELECT actor, target, session, kind, format, act, failed, count(*) AS n,
         min(ts) AS first_ts, max(ts) AS last_ts, sum(byte_length) AS bytes,
         sum(tokens) AS tokens, sum(CAST(cost_usd AS DECIMAL(38, 12))) AS cost_usd
  FROM lines GROUP BY ALL
),
-- top_*: the most frequent value; ties go to the first in sort order
tops AS (
  SELECT actor,
    list_sort(list({'n': -n, 'v': target}) FILTER (WHERE which = 't'))[1].v AS top_target,
    list_sort(list({'n': -n, 'v': kind}) FILTER (WHERE which = 'k'))[1].v AS top_kind
  FROM (SELECT actor, 't' AS which, target, NULL AS kind, sum(n)::BIGINT AS n FROM grouped
        WHERE act AND target IS NOT NULL GROUP BY ALL
        UNION ALL
        SELECT actor, 'k', NULL, kind, sum(n)::BIGINT FROM grouped
        WHERE act AND kind IS NOT NULL GROUP BY ALL)
  GROUP BY actor
)
SELECT g.actor,
       coalesce(sum(n) FILTER (WHERE act), 0)::BIGINT AS events,
       coalesce(sum(n) FILTER (WHERE act AND failed), 0)::BIGINT AS errors,
       count(DISTINCT target) FILTER (WHERE act) AS targets,
       count(DISTINCT session) FILTER (WHERE act) AS sessions,
       any_value(t.top_target) AS top_target,
       any_value(t.top_kind) AS top_kind,
       min(first_ts) FILTER (WHERE act) AS first_ts,
       max(last_ts) FILTER (WHERE act) AS last_ts,
       round(coalesce(sum(n) FILTER (WHERE act), 0) / greatest(epoch(max(last_ts) FILTER (WHERE act))
             - epoch(min(first_ts) FILTER (WHERE act)), 60) * 60, 2) AS per_minute,
       string_agg(DISTINCT format, ',' ORDER BY format) FILTER (WHERE act) AS formats,
       coalesce(sum(bytes), 0) AS bytes,
       coalesce(sum(g.tokens), 0) AS tokens,
       CAST(round(sum(g.cost_usd), 6) AS DOUBLE) AS cost_usd
FROM grouped g LEFT JOIN tops t ON g.actor IS NOT DISTINCT FROM t.actor
GROUP BY g.actor
ORDER BY events DESC, bytes DESC, actor NULLS LAST
LIMIT $limit
