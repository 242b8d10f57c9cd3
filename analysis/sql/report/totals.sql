-- Run totals over the QP keys (a key: host, iface, dir, src, dst, qp).
SELECT COUNT(*) AS qps, COALESCE(SUM(n), 0) AS flow_rows,
  COALESCE(SUM(pkts), 0) AS pkts, COALESCE(SUM(data_pkts), 0) AS data_pkts,
  COALESCE(SUM(ack_pkts), 0) AS ack_pkts, COALESCE(SUM(cnp), 0) AS cnp_pkts,
  COALESCE(SUM(ce), 0) AS ce, COALESCE(SUM(not_ect_data), 0) AS not_ect_data,
  COALESCE(SUM(psn_gaps), 0) AS psn_gaps, COALESCE(SUM(psn_missing), 0) AS psn_missing,
  COALESCE(SUM(psn_retrans), 0) AS psn_retrans, COALESCE(SUM(naks), 0) AS naks,
  COALESCE(SUM(rnr_naks), 0) AS rnr_naks, MIN(first_t0) AS first_t0, MAX(last_t1) AS last_t1
FROM (
  SELECT host, iface, dir, src, dst, qp, COUNT(*) AS n, SUM(pkts) AS pkts, SUM(data_pkts) AS data_pkts,
    SUM(ack_pkts) AS ack_pkts, SUM(cnp) AS cnp, SUM(ce) AS ce, SUM(not_ect_data) AS not_ect_data,
    SUM(psn_gaps) AS psn_gaps, SUM(psn_missing) AS psn_missing, SUM(psn_retrans) AS psn_retrans,
    SUM(naks) AS naks, SUM(rnr_naks) AS rnr_naks, MIN(t0) AS first_t0, MAX(t1) AS last_t1
  FROM v_flows
  GROUP BY host, iface, dir, src, dst, qp
) k
