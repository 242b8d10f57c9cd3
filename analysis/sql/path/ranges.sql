-- The compared range of each key (docs/analysis.md#which-rows-are-compared), as the CTE
-- `ranges (src, dst, qp, lo, hi, tol)` the tally queries start with: the intersection of its
-- points' ranges (keys at two points or more), then narrowed once to the intersection of the
-- points' rows lying whole inside it (still at two points or more). A row lies inside when it
-- does so give or take `tol`: a quarter of the key's longest row at the point whose longest row
-- is shortest (about a quarter of the interval), so that the ends of two observers' rows of the
-- same interval, a few milliseconds apart, are the same end.
WITH r AS (
  SELECT host, iface, dir, point, src, dst, qp, t0, t1 FROM v_flows WHERE pkts > 0
),
seen AS (
  SELECT host, iface, dir, point, src, dst, qp, MIN(t0) AS a, MAX(t1) AS b, MAX(t1 - t0) AS len
  FROM r GROUP BY host, iface, dir, point, src, dst, qp
),
c1 AS (
  SELECT src, dst, qp, MAX(a) AS lo, MIN(b) AS hi, MIN(len) / 4 AS tol
  FROM seen GROUP BY src, dst, qp
  HAVING COUNT(*) >= 2 AND MAX(a) < MIN(b)
),
inside AS (
  SELECT r.host, r.iface, r.dir, r.point, r.src, r.dst, r.qp, c1.tol,
    MIN(r.t0) AS a, MAX(r.t1) AS b
  FROM c1 JOIN r ON r.src = c1.src AND r.dst = c1.dst AND r.qp = c1.qp
  WHERE r.t0 >= c1.lo - c1.tol AND r.t1 <= c1.hi + c1.tol
  GROUP BY r.host, r.iface, r.dir, r.point, r.src, r.dst, r.qp, c1.tol
),
ranges AS (
  SELECT src, dst, qp, MAX(a) AS lo, MIN(b) AS hi, MIN(tol) AS tol
  FROM inside GROUP BY src, dst, qp
  HAVING COUNT(*) >= 2 AND MAX(a) < MIN(b)
)
