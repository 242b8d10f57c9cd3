-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- pfc_without_ecn: per interface and interval (both directions), at least ${pfc_min_xoff}
-- XOFF frames and RoCE packets, but no CE mark at all. figure: XOFF, context: RoCE packets.
SELECT 'pfc_without_ecn' AS part, i.host, i.iface, CAST(NULL AS STRING) AS dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp,
  i.t0, i.t1, i.xoff AS figure, i.roce AS context
FROM (
  SELECT host, iface, t0, MAX(t1) AS t1, SUM(pfc_xoff_p0 + pfc_xoff_p1 + pfc_xoff_p2 + pfc_xoff_p3 + pfc_xoff_p4 + pfc_xoff_p5 + pfc_xoff_p6 + pfc_xoff_p7) AS xoff, SUM(roce) AS roce
  FROM v_ifaces GROUP BY host, iface, t0
) i
LEFT JOIN (
  SELECT host, iface, t0, SUM(ce) AS ce FROM v_flows GROUP BY host, iface, t0
) f ON f.host = i.host AND f.iface = i.iface AND f.t0 = i.t0
WHERE i.xoff >= ${pfc_min_xoff} AND i.roce > 0 AND COALESCE(f.ce, 0) = 0
