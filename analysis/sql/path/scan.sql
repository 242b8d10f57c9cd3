-- roce-analyze path, first pass: every key's rows with packets at each observation point (host,
-- iface, dir, point label): their range (µs), rows and packets, and the first tree (position on
-- the command line) the point is in. DataFusion only (the `tree` column is roce-analyze's).
SELECT host, iface, dir, point, src, dst, qp, MIN(tree) AS tree,
  MIN(t0) AS start_us, MAX(t1) AS end_us, COUNT(*) AS rows, SUM(pkts) AS pkts
FROM (
  SELECT host, iface, dir, point, src, dst, qp, tree, pkts,
    CAST(interval_start AS BIGINT) AS t0, CAST(interval_end AS BIGINT) AS t1
  FROM flows WHERE pkts > 0
) r
GROUP BY host, iface, dir, point, src, dst, qp
