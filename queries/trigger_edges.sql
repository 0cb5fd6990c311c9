-- title: Trigger edges
-- description: Who triggered whom: one row per (source, target) edge of the trigger graph (a
--   hook fired by one agent's completion starting another), with how often, over how many
--   sessions, the deepest hop and when. Edges both ways between two agents hint at a cycle.
-- param: file: str = null  -- only this input file (default: every file)
-- param: min_count = 1  -- list an edge only when it fired at least this often
SELECT t.actor AS source,
       t.target AS target,
       count(*) AS triggers,
       count(DISTINCT t.session) AS sessions,
       max(t.depth) AS max_depth,
       min(t.ts) AS first_ts,
       max(t.ts) AS last_ts,
       EXISTS (SELECT 1 FROM triggers r
               WHERE r.kind = 'trigger' AND r.actor = t.target AND r.target = t.actor
                 AND ($file IS NULL OR r.file = $file)) AS reverse_edge
FROM triggers t
WHERE t.kind = 'trigger' AND t.actor IS NOT NULL AND t.target IS NOT NULL
  AND ($file IS NULL OR t.file = $file)
GROUP BY t.actor, t.target
HAVING count(*) >= $min_count
ORDER BY triggers DESC, source, target
