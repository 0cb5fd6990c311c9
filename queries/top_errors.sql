-- title: Top errors
-- description: The error codes returned most often, one row per code: how many attempts got it,
--   how many callers and sessions, the caller, session and action that got it most, and when.
--   An attempt is counted once: a request with its response is one (ingest gives the request
--   its response's outcome), and so is a message both parties stored.
-- param: limit = 20  -- rows to return
-- param: file: str = null  -- only this input file, as named at ingest (default: every file)
WITH copies AS (  -- a message both parties stored (same kind and id): the copies after the first
  SELECT event_id FROM events
  WHERE kind IN ('message', 'room_post') AND corr_id IS NOT NULL
  QUALIFY event_id <> min(event_id) OVER (PARTITION BY kind, corr_id)
),
attempts AS (
  SELECT file, ts, actor, session, action, error FROM events
  WHERE error IS NOT NULL
    -- actions: not responses, lifecycle lines or session ends
    AND kind IN ('request', 'message', 'room_post', 'session_start', 'step', 'llm_call',
                 'repair_attempt', 'record', 'connection', 'config', 'trigger', 'audit',
                 'tool_call')
    AND event_id NOT IN (SELECT event_id FROM copies)
)
SELECT error,
       count(*) AS attempts,
       count(DISTINCT actor) AS actors,
       count(DISTINCT session) AS sessions,
       -- top_*: the most frequent value; ties go to the first in sort order
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(actor))])[1].v AS top_actor,
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(session))])[1].v AS top_session,
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(action))])[1].v AS top_action,
       min(ts) AS first_ts,
       max(ts) AS last_ts,
       count(DISTINCT file) AS files
FROM attempts
WHERE $file IS NULL OR file = $file
GROUP BY error
ORDER BY attempts DESC, error
LIMIT $limit
