-- title: Finding evidence
-- description: The log lines a finding claims, in file and line order: where to look in the
--   original logs. Without `finding`, the largest finding.
-- param: finding: str = null  -- a finding id (see `largest_findings`); default: the largest
-- param: limit = 1000  -- rows to return
WITH chosen AS (
  SELECT coalesce($finding, (SELECT id FROM findings
                             ORDER BY events DESC, cost_usd DESC NULLS LAST, id LIMIT 1)) AS id
)
SELECT fe.finding_id, e.file, e.line, e.ts, e.kind, e.actor, e.target, e.session, e.action,
       e.error
FROM finding_events fe
JOIN chosen c ON fe.finding_id = c.id
JOIN events e USING (event_id)
ORDER BY e.file, e.line
LIMIT $limit
