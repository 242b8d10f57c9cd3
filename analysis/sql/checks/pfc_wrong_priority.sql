-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- pfc_wrong_priority: PFC XOFF or XON frames on a priority other than ${rdma_priority}, per
-- interface direction, priority and interval (v_pfc: one row per priority). figure: XOFF + XON,
-- context: XOFF.
SELECT CONCAT('priority ', CAST(priority AS STRING)) AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff + pfc_xon AS figure, pfc_xoff AS context
FROM v_pfc WHERE priority <> ${rdma_priority} AND pfc_xoff + pfc_xon > 0
