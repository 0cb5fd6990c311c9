-- title: Top errors
-- description: The error codes returned most often, one row per code: how many attempts got it,
--   how many callers and sessions, the caller, session and action that got it most, and when.
--   An attempt is counted once (a request with its response is one attempt).
-- param: limit = 20  -- rows to return
-- param: file: str = null  -- only this input file, as named at ingest (default: every file)
WITH attempts AS (
  SELECT file, ts, actor, session, action, error FROM requests WHERE error IS NOT NULL
  UNION ALL
  SELECT file, ts, actor, session, action, error FROM events
  WHERE error IS NOT NULL AND kind NOT IN ('request', 'response', 'lifecycle')
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
