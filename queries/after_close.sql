-- title: Activity after a session closed
-- description: Sessions that were closed (a `session.close`-like request, or a `session_end`)
--   and yet saw more activity: who kept going, how much, how it failed, over which lines.
--   Events count requests, messages, triggers and the like (not responses or lifecycle lines,
--   which still bound the line range); the close's own response and the hooks it fired (same
--   correlation id) are left out.
-- param: session: str = null  -- only this session (default: every closed session)
-- param: same_file = true  -- count only activity in the file that logged the close
-- param: min_events = 1  -- list a session only when at least this many events followed
WITH closes AS (
  SELECT file, session, actor AS closed_by, line AS close_line, ts AS closed_at,
         corr_id AS close_corr, coalesce(action, kind) AS close_action
  FROM events
  WHERE session IS NOT NULL AND ts IS NOT NULL
    AND ($session IS NULL OR session = $session)
    AND (kind = 'session_end'
         OR (kind = 'request' AND (action IN ('session.close', 'session.end', 'close')
                                   OR action LIKE '%.close')))
  QUALIFY row_number() OVER (PARTITION BY file, session ORDER BY ts, line) = 1
),
after AS (
  SELECT c.*, e.file AS e_file, e.line AS e_line, e.ts AS e_ts, e.actor AS e_actor,
         e.action AS e_action, e.error AS e_error, e.ok AS e_ok,
         e.kind NOT IN ('response', 'lifecycle') AS e_act
  FROM closes c
  JOIN events e
    ON e.session = c.session
   AND (e.ts > c.closed_at OR (e.ts = c.closed_at AND e.file = c.file AND e.line > c.close_line))
   AND (NOT $same_file OR e.file = c.file)
   AND e.corr_id IS DISTINCT FROM c.close_corr
)
SELECT file, session, closed_by, close_action, close_line, closed_at,
       count(*) FILTER (WHERE e_act) AS events_after,
       count(*) FILTER (WHERE e_act AND (e_error IS NOT NULL OR e_ok = false)) AS errors_after,
       count(DISTINCT e_actor) FILTER (WHERE e_act) AS actors_after,
       -- top_*: the most frequent value; ties go to the first in sort order
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(e_actor) FILTER (WHERE e_act))])[1].v AS top_actor,
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(e_action) FILTER (WHERE e_act))])[1].v AS top_action,
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(e_error) FILTER (WHERE e_act))])[1].v AS top_error,
       min(e_line) FILTER (WHERE e_file = file) AS first_line_after,
       max(e_line) FILTER (WHERE e_file = file) AS last_line_after,
       min(e_ts) AS first_after_ts,
       max(e_ts) AS last_after_ts
FROM after
GROUP BY ALL
HAVING count(*) FILTER (WHERE e_act) >= $min_events
ORDER BY events_after DESC, file, session
