-- A wrapper: ${violations} is one query of ../checks.
-- Per part (rule): the ${top} worst intervals (by start time, over every host) by their figure
-- summed, with the subjects that broke the rule in them; on every row the number of intervals
-- with a violation.
SELECT part, t0, t1, subjects, figure, part_intervals
FROM (
  SELECT part, t0, t1, subjects, figure,
    ROW_NUMBER() OVER (PARTITION BY part ORDER BY figure DESC, t0) AS rn,
    COUNT(*) OVER (PARTITION BY part) AS part_intervals
  FROM (
    SELECT part, t0, MAX(t1) AS t1, COUNT(*) AS subjects, SUM(figure) AS figure
    FROM (${violations}) v
    GROUP BY part, t0
  ) g
) s
WHERE rn <= ${top}
ORDER BY part, rn
