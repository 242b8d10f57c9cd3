-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- pfc_wrong_priority: PFC XOFF or XON frames on a priority other than ${rdma_priority}, per
-- interface direction and interval. figure: XOFF + XON, context: XOFF.
SELECT 'priority 0' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_p0 + pfc_xon_p0 AS figure, pfc_xoff_p0 AS context
FROM v_ifaces WHERE ${rdma_priority} <> 0 AND pfc_xoff_p0 + pfc_xon_p0 > 0
UNION ALL
SELECT 'priority 1' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_p1 + pfc_xon_p1 AS figure, pfc_xoff_p1 AS context
FROM v_ifaces WHERE ${rdma_priority} <> 1 AND pfc_xoff_p1 + pfc_xon_p1 > 0
UNION ALL
SELECT 'priority 2' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_p2 + pfc_xon_p2 AS figure, pfc_xoff_p2 AS context
FROM v_ifaces WHERE ${rdma_priority} <> 2 AND pfc_xoff_p2 + pfc_xon_p2 > 0
UNION ALL
SELECT 'priority 3' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_p3 + pfc_xon_p3 AS figure, pfc_xoff_p3 AS context
FROM v_ifaces WHERE ${rdma_priority} <> 3 AND pfc_xoff_p3 + pfc_xon_p3 > 0
UNION ALL
SELECT 'priority 4' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_p4 + pfc_xon_p4 AS figure, pfc_xoff_p4 AS context
FROM v_ifaces WHERE ${rdma_priority} <> 4 AND pfc_xoff_p4 + pfc_xon_p4 > 0
UNION ALL
SELECT 'priority 5' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_p5 + pfc_xon_p5 AS figure, pfc_xoff_p5 AS context
FROM v_ifaces WHERE ${rdma_priority} <> 5 AND pfc_xoff_p5 + pfc_xon_p5 > 0
UNION ALL
SELECT 'priority 6' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_p6 + pfc_xon_p6 AS figure, pfc_xoff_p6 AS context
FROM v_ifaces WHERE ${rdma_priority} <> 6 AND pfc_xoff_p6 + pfc_xon_p6 > 0
UNION ALL
SELECT 'priority 7' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_p7 + pfc_xon_p7 AS figure, pfc_xoff_p7 AS context
FROM v_ifaces WHERE ${rdma_priority} <> 7 AND pfc_xoff_p7 + pfc_xon_p7 > 0
