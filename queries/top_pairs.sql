-- title: Top pairs
-- description: The pairs of participants that exchanged the most messages, room posts and hook
--   triggers (either direction), with the count each way, the deepest hop and the time span.
-- param: limit = 20  -- rows to return
-- param: file: str = null  -- only this input file (default: every file)
SELECT least(actor, target) AS a,
       greatest(actor, target) AS b,
       count(*) AS exchanges,
       count(*) FILTER (WHERE actor = least(actor, target)) AS a_to_b,
       count(*) FILTER (WHERE actor = greatest(actor, target)) AS b_to_a,
       max(depth) AS max_depth,
       min(ts) AS first_ts,
       max(ts) AS last_ts,
       count(DISTINCT file) AS files
FROM events
WHERE kind IN ('message', 'room_post', 'trigger')
  AND actor IS NOT NULL AND target IS NOT NULL AND actor <> target
  AND ($file IS NULL OR file = $file)
GROUP BY ALL
ORDER BY exchanges DESC, a, b
LIMIT $limit
