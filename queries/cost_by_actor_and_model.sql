-- title: Cost by actor and model
-- description: What each actor spent on each model, from the `event_costs` view: stated costs,
--   tokens priced with the price table, assumed per-call costs, and unpriced tokens (a model with
--   no price is counted as unpriced, never as $0). `cost_usd` sums the events that have a cost.
-- param: limit = 50  -- rows to return
-- param: file: str = null  -- only this input file (default: every file)
SELECT e.actor,
       e.model,
       count(*) AS events,
       sum(c.tokens) AS tokens,
       round(sum(c.cost_usd), 6) AS cost_usd,
       count(*) FILTER (WHERE c.cost_status = 'stated') AS stated,
       count(*) FILTER (WHERE c.cost_status = 'priced') AS priced,
       count(*) FILTER (WHERE c.cost_status = 'assumed') AS assumed,
       count(*) FILTER (WHERE c.cost_status = 'unpriced') AS unpriced,
       coalesce(sum(c.tokens) FILTER (WHERE c.cost_status = 'unpriced'), 0) AS unpriced_tokens
FROM event_costs c
JOIN events e USING (event_id)
WHERE $file IS NULL OR e.file = $file
GROUP BY e.actor, e.model
ORDER BY cost_usd DESC NULLS LAST, events DESC, e.actor, e.model
LIMIT $limit
