-- Per kind, the ${top} (requester key, interval) pairs with the highest p99 in the interval,
-- among those with at least ${latency_min_samples} samples (what the latency_high rule judges),
-- then by samples. p50, p99 and p999 as in latency_qps.sql: bucket indexes, exact in integers.
WITH h AS (
  SELECT host, iface, dir, point, src, dst, qp, kind, t0, MAX(t1) AS t1, value, SUM(pkts) AS n
  FROM v_latency
  WHERE pkts > 0
  GROUP BY host, iface, dir, point, src, dst, qp, kind, t0, value
), c AS (
  SELECT host, iface, dir, point, src, dst, qp, kind, t0, t1, value, n,
    SUM(n) OVER (PARTITION BY host, iface, dir, point, src, dst, qp, kind, t0 ORDER BY value
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum,
    SUM(n) OVER (PARTITION BY host, iface, dir, point, src, dst, qp, kind, t0) AS total
  FROM h
), q AS (
  SELECT host, iface, dir, point, src, dst, qp, kind, t0, MAX(t1) AS t1, MAX(total) AS samples,
    MIN(CASE WHEN 2 * cum >= total THEN value END) AS p50,
    MIN(CASE WHEN 100 * cum >= 99 * total THEN value END) AS p99,
    MIN(CASE WHEN 1000 * cum >= 999 * total THEN value END) AS p999
  FROM c
  GROUP BY host, iface, dir, point, src, dst, qp, kind, t0
  HAVING MAX(total) >= ${latency_min_samples}
)
SELECT kind, host, iface, dir, point, src, dst, qp, t0, t1, samples, p50, p99, p999
FROM (
  SELECT q.*,
    ROW_NUMBER() OVER (PARTITION BY kind ORDER BY p99 DESC, samples DESC, t0,
      host NULLS LAST, iface NULLS LAST, dir NULLS LAST, point NULLS LAST, src NULLS LAST, dst NULLS LAST,
      qp NULLS LAST) AS rn
  FROM q
) r
WHERE rn <= ${top}
ORDER BY kind, rn
