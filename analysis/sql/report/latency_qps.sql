-- Per kind, the ${top} requester keys with the highest p99 over the whole run (their
-- intervals' histograms summed); keys with at least ${latency_min_samples} samples first (a p99
-- of a few samples says little), then by p99, then by samples. p50, p99 and p999 are bucket
-- indexes: the bucket holding the sample of rank ceil(q n), found exactly in integers (the first
-- bucket whose running count c has c >= q n); a bucket's upper edge is 2^(value/4) s.
WITH h AS (
  SELECT host, iface, dir, point, src, dst, qp, kind, value, SUM(pkts) AS n, MIN(t0) AS first_t0,
    MAX(t1) AS last_t1
  FROM v_latency
  WHERE pkts > 0
  GROUP BY host, iface, dir, point, src, dst, qp, kind, value
), c AS (
  SELECT host, iface, dir, point, src, dst, qp, kind, value, n, first_t0, last_t1,
    SUM(n) OVER (PARTITION BY host, iface, dir, point, src, dst, qp, kind ORDER BY value
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum,
    SUM(n) OVER (PARTITION BY host, iface, dir, point, src, dst, qp, kind) AS total
  FROM h
), q AS (
  SELECT host, iface, dir, point, src, dst, qp, kind, MAX(total) AS samples,
    MIN(CASE WHEN 2 * cum >= total THEN value END) AS p50,
    MIN(CASE WHEN 100 * cum >= 99 * total THEN value END) AS p99,
    MIN(CASE WHEN 1000 * cum >= 999 * total THEN value END) AS p999,
    MAX(value) AS max_value, MIN(first_t0) AS first_t0, MAX(last_t1) AS last_t1
  FROM c
  GROUP BY host, iface, dir, point, src, dst, qp, kind
)
SELECT kind, host, iface, dir, point, src, dst, qp, samples, p50, p99, p999, max_value, first_t0,
  last_t1, keys
FROM (
  SELECT q.*,
    ROW_NUMBER() OVER (PARTITION BY kind ORDER BY
      CASE WHEN samples >= ${latency_min_samples} THEN 0 ELSE 1 END, p99 DESC, samples DESC,
      host NULLS LAST, iface NULLS LAST, dir NULLS LAST, point NULLS LAST, src NULLS LAST, dst NULLS LAST,
      qp NULLS LAST) AS rn,
    COUNT(*) OVER (PARTITION BY kind) AS keys
  FROM q
) r
WHERE rn <= ${top}
ORDER BY kind, rn
