-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- psn_gap (figure: gaps, context: PSNs missing) and go_back_n (figure: retransmitted PSNs,
-- context: those behind the highest) per key and interval.
SELECT 'psn_gap' AS part, host, iface, dir, src, dst, qp, t0, t1, psn_gaps AS figure, psn_missing AS context
FROM v_flows WHERE psn_gaps > 0
UNION ALL
SELECT 'go_back_n' AS part, host, iface, dir, src, dst, qp, t0, t1, psn_retrans AS figure, psn_behind AS context
FROM v_flows WHERE psn_retrans > 0
UNION ALL
SELECT 'icrc_bad' AS part, host, iface, dir, src, dst, qp, t0, t1, icrc_bad AS figure, icrc_ok AS context
FROM v_flows WHERE icrc_bad > 0
