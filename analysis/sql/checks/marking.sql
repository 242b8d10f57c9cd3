-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- Marking (dscp_mismatch, pcp_mismatch, not_ect): per key, interval and histogram, the packets
-- whose DSCP, PCP or ECN the policy does not expect (${marking_off}); context: the class's packets.
SELECT hist AS part, host, iface, dir, src, dst, qp, t0, t1,
  SUM(CASE WHEN ${marking_off} THEN pkts ELSE 0 END) AS figure,
  SUM(pkts) AS context
FROM v_hist
WHERE hist IN ('dscp_data', 'dscp_ack', 'dscp_cnp', 'pcp_data', 'pcp_ack', 'pcp_cnp', 'ecn_data', 'ecn_ack', 'ecn_cnp')
GROUP BY hist, host, iface, dir, src, dst, qp, t0, t1
HAVING SUM(CASE WHEN ${marking_off} THEN pkts ELSE 0 END) > 0
