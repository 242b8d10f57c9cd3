-- The keys seen at one point only (docs/analysis.md#which-rows-are-compared) that a host QP
-- sends (`${sent}`, sent.sql), over all their rows, as the CTE `ranges (src, dst, qp, lo, hi,
-- tol)` the tally queries (counts.sql, hists.sql) start with: their sums at that point, which
-- the request is compared with. Keys at several points are left out: theirs come from the
-- compared range (ranges.sql).
WITH sent AS (
${sent}
),
wanted AS (
  SELECT DISTINCT qp, dgid FROM sent
),
seen AS (
  SELECT f.host, f.iface, f.dir, f.point, f.src, f.dst, f.qp, MIN(f.t0) AS a, MAX(f.t1) AS b
  FROM wanted w
  JOIN v_flows f ON f.qp = w.qp AND f.dst = w.dgid
  WHERE f.pkts > 0
  GROUP BY f.host, f.iface, f.dir, f.point, f.src, f.dst, f.qp
),
ranges AS (
  SELECT src, dst, qp, MIN(a) AS lo, MAX(b) AS hi, CAST(0 AS BIGINT) AS tol
  FROM seen
  GROUP BY src, dst, qp
  HAVING COUNT(*) = 1
)
