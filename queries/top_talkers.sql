-- title: Top talkers
-- description: The actors that did the most: requests sent, messages and room posts written,
--   hooks fired, LLM calls and steps made (responses, lifecycle lines and session ends are not
--   counted, so one exchange counts once), with their errors, reach and pace.
-- param: limit = 20  -- rows to return
-- param: file: str = null  -- only this input file (default: every file)
SELECT actor,
       count(*) AS events,
       count(*) FILTER (WHERE error IS NOT NULL OR ok = false) AS errors,
       count(DISTINCT target) AS targets,
       count(DISTINCT session) AS sessions,
       -- top_*: the most frequent value; ties go to the first in sort order
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(target))])[1].v AS top_target,
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(kind))])[1].v AS top_kind,
       min(ts) AS first_ts,
       max(ts) AS last_ts,
       round(count(*) / greatest(epoch(max(ts)) - epoch(min(ts)), 60) * 60, 2) AS per_minute,
       string_agg(DISTINCT format, ',' ORDER BY format) AS formats
FROM events
WHERE actor IS NOT NULL
  AND kind NOT IN ('response', 'lifecycle', 'session_end')
  AND ($file IS NULL OR file = $file)
GROUP BY actor
ORDER BY events DESC, actor
LIMIT $limit
