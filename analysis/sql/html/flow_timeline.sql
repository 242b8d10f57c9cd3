-- roce-analyze html: per interface of ${ifaces} and bucket of ${bucket_us} µs from ${origin_us}
-- (all QP keys and directions): data packets, CE marks and their share of the data packets,
-- CNPs and CNPs per second (over the bucket's length), PSN gaps, retransmitted PSNs; b the
-- bucket.
SELECT host, iface, (t0 - ${origin_us}) / ${bucket_us} AS b, MIN(t0) AS t0, MAX(t1) AS t1,
  COALESCE(SUM(data_pkts), 0) AS data_pkts,
  COALESCE(SUM(ce), 0) AS ce,
  CAST(SUM(ce) AS DOUBLE) / NULLIF(SUM(data_pkts), 0) AS ce_share,
  COALESCE(SUM(cnp), 0) AS cnp,
  CAST(SUM(cnp) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS cnp_per_s,
  COALESCE(SUM(psn_gaps), 0) AS psn_gaps,
  COALESCE(SUM(psn_retrans), 0) AS psn_retrans
FROM v_flows
WHERE ${ifaces}
GROUP BY host, iface, (t0 - ${origin_us}) / ${bucket_us}
ORDER BY host, iface, t0
