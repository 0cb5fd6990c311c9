-- title: Top talkers
-- description: The actors that did the most: requests sent, messages and room posts written,
--   hooks fired, LLM calls and steps made, each counted once (responses, lifecycle lines and
--   session ends are not counted, and a message both parties stored is one), with their
--   errors, reach and pace, the log bytes of every line that names them (responses and
--   lifecycle lines included), their tokens and what they cost (`event_costs`).
-- param: limit = 20  -- rows to return
-- param: file: str = null  -- only this input file (default: every file)
-- param: no_actor = false  -- also list the lines that name no actor, as one row with no actor
WITH copies AS (  -- a message both parties stored (same kind and id): the copies after the first
  SELECT event_id FROM events
  WHERE kind IN ('message', 'room_post') AND corr_id IS NOT NULL
  QUALIFY event_id <> min(event_id) OVER (PARTITION BY kind, corr_id)
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
)
SELECT actor,
       count(*) FILTER (WHERE act) AS events,
       count(*) FILTER (WHERE act AND failed) AS errors,
       count(DISTINCT target) FILTER (WHERE act) AS targets,
       count(DISTINCT session) FILTER (WHERE act) AS sessions,
       -- top_*: the most frequent value; ties go to the first in sort order
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(target) FILTER (WHERE act))])[1].v AS top_target,
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(kind) FILTER (WHERE act))])[1].v AS top_kind,
       min(ts) FILTER (WHERE act) AS first_ts,
       max(ts) FILTER (WHERE act) AS last_ts,
       round(count(*) FILTER (WHERE act) / greatest(epoch(max(ts) FILTER (WHERE act))
             - epoch(min(ts) FILTER (WHERE act)), 60) * 60, 2) AS per_minute,
       string_agg(DISTINCT format, ',' ORDER BY format) FILTER (WHERE act) AS formats,
       coalesce(sum(byte_length), 0) AS bytes,
       coalesce(sum(tokens), 0) AS tokens,
       round(sum(cost_usd), 6) AS cost_usd
FROM lines
GROUP BY actor
ORDER BY events DESC, bytes DESC, actor NULLS LAST
LIMIT $limit
