-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- qp_map_full (figure: RoCE packets of keys that could not be tracked) and events_lost
-- (figure: first-occurrence events lost), per interface direction and interval.
SELECT 'qp_map_full' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  qp_insert_failed AS figure, roce AS context
FROM v_ifaces WHERE qp_insert_failed > 0
UNION ALL
SELECT 'events_lost' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  events_lost AS figure, roce AS context
FROM v_ifaces WHERE events_lost > 0
