-- Per compared key and point: the DSCP, PCP and ECN histograms of each class summed over the
-- rows inside the key's range.
${ranges}
SELECT h.host, h.iface, h.dir, h.point, h.src, h.dst, h.qp, h.hist, h.value, SUM(h.pkts) AS pkts
FROM ranges g
JOIN v_hist h ON h.src = g.src AND h.dst = g.dst AND h.qp = g.qp
WHERE h.t0 >= g.lo - g.tol AND h.t1 <= g.hi + g.tol
  AND h.hist IN ('dscp_data', 'dscp_ack', 'dscp_cnp', 'pcp_data', 'pcp_ack', 'pcp_cnp', 'ecn_data', 'ecn_ack', 'ecn_cnp')
GROUP BY h.host, h.iface, h.dir, h.point, h.src, h.dst, h.qp, h.hist, h.value
