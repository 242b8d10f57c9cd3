-- roce-analyze html: the interfaces drawn, the most troubled first (XOFF and 802.3x PAUSE
-- frames, PSN gaps, retransmitted PSNs, CE marks), at most ${max_ifaces}; each with its first
-- and last interval (µs) and the number of interfaces in all.
SELECT host, iface, xoff, faults, first_t0, last_t1, COUNT(*) OVER () AS ifaces
FROM (
SELECT host, iface, SUM(xoff) AS xoff, SUM(faults) AS faults, MIN(t0) AS first_t0, MAX(t1) AS last_t1
FROM (
  SELECT host, iface, t0, t1, COALESCE(pfc_xoff_p0, 0) + COALESCE(pfc_xoff_p1, 0) + COALESCE(pfc_xoff_p2, 0) + COALESCE(pfc_xoff_p3, 0) + COALESCE(pfc_xoff_p4, 0) + COALESCE(pfc_xoff_p5, 0) + COALESCE(pfc_xoff_p6, 0) + COALESCE(pfc_xoff_p7, 0) AS xoff, COALESCE(pause_frames, 0) AS faults FROM v_ifaces
  UNION ALL
  SELECT host, iface, t0, t1, 0 AS xoff, COALESCE(psn_gaps, 0) + COALESCE(psn_retrans, 0) + COALESCE(ce, 0) AS faults
  FROM v_flows
) u
GROUP BY host, iface
) i
ORDER BY xoff + faults DESC, host, iface
LIMIT ${max_ifaces}
