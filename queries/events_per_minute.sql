-- title: Events per minute
-- description: How busy the log was over time: events, requests and errors per time bucket,
--   with the busiest actor of each bucket. Only buckets with events are listed.
-- param: minutes = 1  -- bucket width in minutes
-- param: file: str = null  -- only this input file (default: every file)
-- param: session: str = null  -- only this session (default: every session)
-- param: actor: str = null  -- only this actor (default: every actor)
SELECT time_bucket(to_minutes($minutes), ts) AS minute,
       count(*) AS events,
       count(*) FILTER (WHERE kind = 'request') AS requests,
       count(*) FILTER (WHERE error IS NOT NULL AND kind NOT IN ('response', 'lifecycle')) AS errors,
       count(DISTINCT actor) AS actors,
       -- top_*: the most frequent value; ties go to the first in sort order
       list_sort([{'n': -e.value::BIGINT, 'v': e.key} for e in map_entries(histogram(actor))])[1].v AS top_actor
FROM events
WHERE ts IS NOT NULL
  AND ($file IS NULL OR file = $file)
  AND ($session IS NULL OR session = $session)
  AND ($actor IS NULL OR actor = $actor)
GROUP BY minute
ORDER BY minute
