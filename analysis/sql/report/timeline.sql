-- One key's (or the filtered keys') rows, interval by interval (report --qp): the counts, the
-- packets whose marking the policy does not expect (${marking_off}): only those are grouped,
-- and they are the join's (in-memory) build side; and the interval's ACK round trips (trees
-- replayed with --latency): their number and p99 as a bucket index (the first bucket whose
-- running count c has 100 c >= 99 n; its upper edge is 2^(index/4) s), null without samples.
WITH lc AS (
  SELECT host, iface, dir, point, src, dst, qp, t0, value, n,
    SUM(n) OVER (PARTITION BY host, iface, dir, point, src, dst, qp, t0 ORDER BY value
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum,
    SUM(n) OVER (PARTITION BY host, iface, dir, point, src, dst, qp, t0) AS total
  FROM (
    SELECT host, iface, dir, point, src, dst, qp, t0, value, SUM(pkts) AS n
    FROM v_latency
    WHERE kind = 'ack' AND pkts > 0
    GROUP BY host, iface, dir, point, src, dst, qp, t0, value
  ) h
), l AS (
  SELECT host, iface, dir, point, src, dst, qp, t0, MAX(total) AS samples,
    MIN(CASE WHEN 100 * cum >= 99 * total THEN value END) AS p99
  FROM lc
  GROUP BY host, iface, dir, point, src, dst, qp, t0
)
SELECT f.host, f.iface, f.dir, f.src, f.dst, f.qp, f.t0, f.t1, f.pkts, f.data_pkts, f.ack_pkts, f.cnp, f.ce,
  f.not_ect_data, f.psn_gaps, f.psn_missing, f.psn_retrans, f.naks, f.max_udp_payload,
  COALESCE(m.off, 0) AS off_policy, l.samples AS ack_samples, l.p99 AS ack_p99_index
FROM (
  SELECT host, iface, dir, src, dst, qp, t0, SUM(pkts) AS off
  FROM v_hist
  WHERE hist IN ('dscp_data', 'dscp_ack', 'dscp_cnp', 'pcp_data', 'pcp_ack', 'pcp_cnp', 'ecn_data', 'ecn_ack', 'ecn_cnp')
    AND ${marking_off} AND pkts > 0
  GROUP BY host, iface, dir, src, dst, qp, t0
) m
RIGHT JOIN v_flows f ON m.host = f.host AND m.iface = f.iface AND m.dir = f.dir AND m.src = f.src AND m.dst = f.dst
  AND m.qp = f.qp AND m.t0 = f.t0
LEFT JOIN l ON l.host = f.host AND l.iface = f.iface AND l.dir = f.dir
  AND COALESCE(l.point, '') = COALESCE(f.point, '') AND l.src = f.src AND l.dst = f.dst
  AND l.qp = f.qp AND l.t0 = f.t0
ORDER BY f.host, f.iface, f.dir, f.src, f.dst, f.qp, f.t0
LIMIT ${limit}
