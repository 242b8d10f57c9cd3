-- The marking values off the policy (${marking_off}), per marking part (dscp_data, pcp_ack,
-- ecn_data, ...) and key: which value the packets carried, how many, and the start of the
-- first interval with one (µs). What a bleach (DSCP 0) and a remark (46, EF) tell apart.
SELECT hist AS part, host, iface, dir, src, dst, qp, value, SUM(pkts) AS pkts, MIN(t0) AS first_t0
FROM v_hist
WHERE hist IN ('dscp_data', 'dscp_ack', 'dscp_cnp', 'pcp_data', 'pcp_ack', 'pcp_cnp', 'ecn_data', 'ecn_ack', 'ecn_cnp')
  AND ${marking_off} AND pkts > 0
GROUP BY hist, host, iface, dir, src, dst, qp, value
ORDER BY part, host, iface, dir, src, dst, qp, pkts DESC, value
