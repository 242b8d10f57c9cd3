-- Per compared key and point: sums over the rows inside the key's range, the span of those
-- rows, and the rows with packets left out (outside the range or straddling one of its ends).
${ranges}
SELECT f.host, f.iface, f.dir, f.point, f.src, f.dst, f.qp, g.lo, g.hi,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN 1 ELSE 0 END) AS rows,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.pkts ELSE 0 END) AS pkts,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.data_pkts ELSE 0 END) AS data_pkts,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.ack_pkts ELSE 0 END) AS ack_pkts,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.cnp ELSE 0 END) AS cnp,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.ce ELSE 0 END) AS ce,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.psn_gaps ELSE 0 END) AS psn_gaps,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.psn_missing ELSE 0 END) AS psn_missing,
  MIN(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.t0 END) AS start_us,
  MAX(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN f.t1 END) AS end_us,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN 0 ELSE 1 END) AS excluded_rows,
  SUM(CASE WHEN f.t0 >= g.lo - g.tol AND f.t1 <= g.hi + g.tol THEN 0 ELSE f.pkts END) AS excluded_pkts
FROM ranges g
JOIN v_flows f ON f.src = g.src AND f.dst = g.dst AND f.qp = g.qp
WHERE f.pkts > 0
GROUP BY f.host, f.iface, f.dir, f.point, f.src, f.dst, f.qp, g.lo, g.hi
