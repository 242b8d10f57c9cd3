-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- latency_high: per requester key, interval and kind (ACK round trip, READ latency), at least
-- ${latency_min_samples} samples and a p99 certainly at or over the policy's threshold: the
-- bucket holding the sample of rank ceil(0.99 n) starts at or above it, that is fewer than
-- 0.99 n samples lie in the buckets below index ${latency_min_index} (the first bucket whose
-- lower edge is at least the threshold; docs/latency.md). Exact in integers on every engine.
-- figure: the samples in those buckets (at or over the threshold), context: all the samples.
SELECT 'latency_' || kind AS part, host, iface, dir, src, dst, qp, t0, MAX(t1) AS t1,
  SUM(CASE WHEN value >= ${latency_min_index} THEN pkts ELSE 0 END) AS figure,
  SUM(pkts) AS context
FROM v_latency
WHERE kind IN ('ack', 'read') AND pkts > 0
GROUP BY host, iface, dir, point, src, dst, qp, t0, kind
HAVING SUM(pkts) >= ${latency_min_samples}
  AND 100 * SUM(CASE WHEN value < ${latency_min_index} THEN pkts ELSE 0 END) < 99 * SUM(pkts)
