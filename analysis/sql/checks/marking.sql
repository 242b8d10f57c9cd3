-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- Marking (dscp_mismatch, pcp_mismatch, not_ect): per key, interval and histogram, the packets
-- whose DSCP, PCP or ECN the policy does not expect (${marking_off}); context: the class's packets.
-- Only the off-policy buckets are grouped, so a fleet that marks as expected costs one scan.
SELECT part, host, iface, dir, src, dst, qp, t0, MAX(t1) AS t1, SUM(figure) AS figure, SUM(context) AS context
FROM (
  SELECT hist AS part, host, iface, dir, point, src, dst, qp, t0, MAX(t1) AS t1,
    SUM(pkts) AS figure, MAX(class_pkts) AS context
  FROM v_hist
  WHERE hist IN ('dscp_data', 'dscp_ack', 'dscp_cnp', 'pcp_data', 'pcp_ack', 'pcp_cnp', 'ecn_data', 'ecn_ack', 'ecn_cnp')
    AND ${marking_off} AND pkts > 0
  GROUP BY hist, host, iface, dir, point, src, dst, qp, t0
) r
GROUP BY part, host, iface, dir, src, dst, qp, t0
