-- title: Cost by actor and model
-- description: What each actor spent on each model, from the `event_costs` view, one row per
--   basis of the figure: `stated` (the log says), `priced` (tokens × the price table),
--   `assumed` (the cost per agent call of logs without tokens) and `unpriced` (tokens of a
--   model with no price: counted as unpriced, never as $0, so its `cost_usd` is NULL). With
--   `per_actor=false`, what each model cost, its actors together (`actors` counts them).
-- param: limit = 50  -- rows to return
-- param: file: str = null  -- only this input file (default: every file)
-- param: per_actor = true  -- a row per actor; false: a row per model, its actors together
-- dollars summed as decimals: the same to the last digit whatever order the rows come in
SELECT CASE WHEN $per_actor THEN e.actor END AS actor,
       e.model,
       c.cost_status AS basis,
       count(*) AS events,
       count(DISTINCT e.actor) AS actors,
       sum(c.tokens) AS tokens,
       CAST(round(sum(CAST(c.cost_usd AS DECIMAL(38, 12))), 6) AS DOUBLE) AS cost_usd
FROM event_costs c
JOIN events e USING (event_id)
WHERE $file IS NULL OR e.file = $file
GROUP BY ALL
ORDER BY cost_usd DESC NULLS LAST, events DESC, actor NULLS LAST, model NULLS LAST, basis
LIMIT $limit
