-- title: Exchanges between a pair
-- description: Every event between two participants, either direction, in time order, with the
--   gap since the previous one. Without `a` and `b`, the busiest pair of `top_pairs`.
-- param: a: str = null  -- one participant (actor or target); default: the busiest pair
-- param: b: str = null  -- the other participant
-- param: limit = 1000  -- rows to return
WITH busiest AS (
  SELECT least(actor, target) AS a, greatest(actor, target) AS b
  FROM events
  WHERE kind IN ('message', 'room_post', 'trigger')
    AND actor IS NOT NULL AND target IS NOT NULL AND actor <> target
  GROUP BY ALL
  ORDER BY count(*) DESC, a, b
  LIMIT 1
),
pair AS (
  SELECT coalesce($a, (SELECT a FROM busiest)) AS a,
         coalesce($b, (SELECT b FROM busiest)) AS b
)
SELECT e.ts, e.file, e.line, e.kind, e.actor, e.target,
       CASE WHEN e.actor = p.a THEN 'a→b' ELSE 'b→a' END AS direction,
       e.session, e.action, e.depth, e.role, e.error,
       epoch_ms(e.ts) - epoch_ms(lag(e.ts) OVER (PARTITION BY e.file ORDER BY e.ts, e.line))
         AS gap_ms
FROM events e, pair p
WHERE (e.actor = p.a AND e.target = p.b) OR (e.actor = p.b AND e.target = p.a)
ORDER BY e.ts, e.file, e.line
LIMIT $limit
