-- A wrapper: ${violations} is one query of ../checks.
-- Per part (rule): the ${top} worst subjects (key, interface or pair) by their figure summed,
-- each with its violations (intervals in which the rule fires), figure, largest figure in one
-- interval, context and time span; on every row the part's totals over all its subjects.
SELECT part, host, iface, dir, src, dst, qp, violations, figure, peak, context, first_t0, last_t1,
  part_subjects, part_violations, part_figure, part_peak
FROM (
  SELECT part, host, iface, dir, src, dst, qp, violations, figure, peak, context, first_t0, last_t1,
    ROW_NUMBER() OVER (PARTITION BY part ORDER BY figure DESC, host NULLS LAST,
      iface NULLS LAST, dir NULLS LAST, src NULLS LAST, dst NULLS LAST, qp NULLS LAST) AS rn,
    COUNT(*) OVER (PARTITION BY part) AS part_subjects,
    SUM(violations) OVER (PARTITION BY part) AS part_violations,
    SUM(figure) OVER (PARTITION BY part) AS part_figure,
    MAX(peak) OVER (PARTITION BY part) AS part_peak
  FROM (
    SELECT part, host, iface, dir, src, dst, qp, COUNT(*) AS violations, SUM(figure) AS figure, MAX(figure) AS peak,
      SUM(context) AS context, MIN(t0) AS first_t0, MAX(t1) AS last_t1
    FROM (${violations}) v
    GROUP BY part, host, iface, dir, src, dst, qp
  ) g
) s
WHERE rn <= ${top}
ORDER BY part, rn
