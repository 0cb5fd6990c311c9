-- title: Largest findings
-- description: The last scan's findings, largest first (by the events each claims, then cost):
--   what each is, how big (events, lines, bytes, tokens, cost) and from when to when.
-- param: limit = 20  -- rows to return
-- param: detector: str = null  -- only this detector's findings (default: every detector)
SELECT f.id, f.detector, f.severity, f.title, f.events, f.lines, f.bytes, f.tokens,
       f.cost_usd, f.start, f."end", f.actors, f.sessions,
       (SELECT count(*) FROM finding_events fe WHERE fe.finding_id = f.id) AS claimed_lines
FROM findings f
WHERE $detector IS NULL OR f.detector = $detector
ORDER BY f.events DESC, f.cost_usd DESC NULLS LAST, f.id
LIMIT $limit
