-- title: Top errors
-- description: The error codes returned most often, one row per code: how many attempts got it,
--   how many callers and sessions, the caller, session and action that got it most, and when.
--   An attempt is counted once: a request with its response is one (ingest gives the request
--   its response's outcome), and so is a message both parties stored.
-- param: limit = 20  -- rows to return
-- param: file: str = null  -- only this input file, as named at ingest (default: every file)
-- the messages' ids, read whole before they are filtered: DuckDB tries `corr_id IS NOT NULL`
-- on every event's id before their kind, where no event is a message (0.02 s at 1.27 M events)
WITH message_ids AS MATERIALIZED (SELECT event_id, format, kind, corr_id FROM messages),
copies AS (  -- a message both parties stored (same format, kind and id): the copies after the first
  SELECT event_id FROM message_ids WHERE corr_id IS NOT NULL
  QUALIFY event_id <> min(event_id) OVER (PARTITION BY format, kind, corr_id)
),
attempts AS (
  SELECT file, ts, actor, session, action, error FROM events
  WHERE error IS NOT NULL
    -- actions: not responses, lifecycle lines or session ends
    AND kind IN ('request', 'message', 'room_post', 'session_start', 'step', 'llm_call',
                 'repair_attempt', 'record', 'connection', 'config', 'trigger', 'audit',
                 'tool_call')
    AND event_id NOT IN (SELECT event_id FROM copies)
),
-- the attempts counted by what the figures below tell apart: a few rows per error, which
-- the distinct counts and the most frequent values read instead of every attempt
grouped AS MATERIALIZED (
  SELECT error, actor, session, action, file, count(*) AS n, min(ts) AS first_ts,
         max(ts) AS last_ts
  FROM attempts WHERE $file IS NULL OR file = $file GROUP BY ALL
),
-- top_*: the most frequent value; ties go to the first in sort order
tops AS (
  SELECT error,
    list_sort(list({'n': -n, 'v': v}) FILTER (WHERE which = 'a'))[1].v AS top_actor,
    list_sort(list({'n': -n, 'v': v}) FILTER (WHERE which = 's'))[1].v AS top_session,
    list_sort(list({'n': -n, 'v': v}) FILTER (WHERE which = 'c'))[1].v AS top_action
  FROM (SELECT error, 'a' AS which, actor AS v, sum(n)::BIGINT AS n FROM grouped
        WHERE actor IS NOT NULL GROUP BY ALL
        UNION ALL
        SELECT error, 's', session, sum(n)::BIGINT FROM grouped
        WHERE session IS NOT NULL GROUP BY ALL
        UNION ALL
        SELECT error, 'c', action, sum(n)::BIGINT FROM grouped
        WHERE action IS NOT NULL GROUP BY ALL)
  GROUP BY error
)
SELECT g.error,
       sum(n)::BIGINT AS attempts,
       count(DISTINCT actor) AS actors,
       count(DISTINCT session) AS sessions,
       any_value(t.top_actor) AS top_actor,
       any_value(t.top_session) AS top_session,
       any_value(t.top_action) AS top_action,
       min(first_ts) AS first_ts,
       max(last_ts) AS last_ts,
       count(DISTINCT file) AS files
FROM grouped g LEFT JOIN tops t ON g.error IS NOT DISTINCT FROM t.error
GROUP BY g.error
ORDER BY attempts DESC, error
LIMIT $limit
