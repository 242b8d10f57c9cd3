-- One key's (or the filtered keys') rows, interval by interval (report --qp): the counts and
-- the packets whose marking the policy does not expect (${marking_off}): only those are grouped,
-- and they are the join's (in-memory) build side.
SELECT f.host, f.iface, f.dir, f.src, f.dst, f.qp, f.t0, f.t1, f.pkts, f.data_pkts, f.ack_pkts, f.cnp, f.ce,
  f.not_ect_data, f.psn_gaps, f.psn_missing, f.psn_retrans, f.naks, f.max_udp_payload,
  COALESCE(m.off, 0) AS off_policy
FROM (
  SELECT host, iface, dir, src, dst, qp, t0, SUM(pkts) AS off
  FROM v_hist
  WHERE hist IN ('dscp_data', 'dscp_ack', 'dscp_cnp', 'pcp_data', 'pcp_ack', 'pcp_cnp', 'ecn_data', 'ecn_ack', 'ecn_cnp')
    AND ${marking_off} AND pkts > 0
  GROUP BY host, iface, dir, src, dst, qp, t0
) m
RIGHT JOIN v_flows f ON m.host = f.host AND m.iface = f.iface AND m.dir = f.dir AND m.src = f.src AND m.dst = f.dst
  AND m.qp = f.qp AND m.t0 = f.t0
ORDER BY f.host, f.iface, f.dir, f.src, f.dst, f.qp, f.t0
LIMIT ${limit}
