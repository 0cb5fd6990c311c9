-- title: Quarantine summary
-- description: The lines that could not be read as events, by file and reason: how many, how
--   many bytes, the first and last line, and a preview of the first one.
-- param: file: str = null  -- only this input file (default: every file)
SELECT file, reason,
       count(*) AS lines,
       sum(byte_length) AS bytes,
       min(line) AS first_line,
       max(line) AS last_line,
       arg_min(preview, line) AS first_preview
FROM quarantine
WHERE $file IS NULL OR file = $file
GROUP BY file, reason
ORDER BY lines DESC, file, reason
