-- The compared range of each key (docs/analysis.md#which-rows-are-compared), as the CTE
-- `ranges (src, dst, qp, lo, hi)` the tally queries start with: the intersection of its points'
-- ranges (keys at two points or more), then narrowed once to the intersection of the points'
-- rows lying whole inside it (still at two points or more).
WITH r AS (
  SELECT host, iface, dir, point, src, dst, qp, t0, t1 FROM v_flows WHERE pkts > 0
),
seen AS (
  SELECT host, iface, dir, point, src, dst, qp, MIN(t0) AS a, MAX(t1) AS b
  FROM r GROUP BY host, iface, dir, point, src, dst, qp
),
c1 AS (
  SELECT src, dst, qp, MAX(a) AS lo, MIN(b) AS hi
  FROM seen GROUP BY src, dst, qp
  HAVING COUNT(*) >= 2 AND MAX(a) < MIN(b)
),
inside AS (
  SELECT r.host, r.iface, r.dir, r.point, r.src, r.dst, r.qp, MIN(r.t0) AS a, MAX(r.t1) AS b
  FROM c1 JOIN r ON r.src = c1.src AND r.dst = c1.dst AND r.qp = c1.qp
  WHERE r.t0 >= c1.lo AND r.t1 <= c1.hi
  GROUP BY r.host, r.iface, r.dir, r.point, r.src, r.dst, r.qp
),
ranges AS (
  SELECT src, dst, qp, MAX(a) AS lo, MIN(b) AS hi
  FROM inside GROUP BY src, dst, qp
  HAVING COUNT(*) >= 2 AND MAX(a) < MIN(b)
)
