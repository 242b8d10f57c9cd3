-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- pfc_storm: the densest one-second window's XOFF frames of a priority above
-- ${pfc_storm_xoff_per_s}, per interface direction and interval. figure: that peak (XOFF/s),
-- context: the interval's XOFF frames.
SELECT 'priority 0' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s_p0 AS figure, pfc_xoff_p0 AS context
FROM v_ifaces WHERE pfc_xoff_peak_1s_p0 > ${pfc_storm_xoff_per_s}
UNION ALL
SELECT 'priority 1' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s_p1 AS figure, pfc_xoff_p1 AS context
FROM v_ifaces WHERE pfc_xoff_peak_1s_p1 > ${pfc_storm_xoff_per_s}
UNION ALL
SELECT 'priority 2' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s_p2 AS figure, pfc_xoff_p2 AS context
FROM v_ifaces WHERE pfc_xoff_peak_1s_p2 > ${pfc_storm_xoff_per_s}
UNION ALL
SELECT 'priority 3' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s_p3 AS figure, pfc_xoff_p3 AS context
FROM v_ifaces WHERE pfc_xoff_peak_1s_p3 > ${pfc_storm_xoff_per_s}
UNION ALL
SELECT 'priority 4' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s_p4 AS figure, pfc_xoff_p4 AS context
FROM v_ifaces WHERE pfc_xoff_peak_1s_p4 > ${pfc_storm_xoff_per_s}
UNION ALL
SELECT 'priority 5' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s_p5 AS figure, pfc_xoff_p5 AS context
FROM v_ifaces WHERE pfc_xoff_peak_1s_p5 > ${pfc_storm_xoff_per_s}
UNION ALL
SELECT 'priority 6' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s_p6 AS figure, pfc_xoff_p6 AS context
FROM v_ifaces WHERE pfc_xoff_peak_1s_p6 > ${pfc_storm_xoff_per_s}
UNION ALL
SELECT 'priority 7' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s_p7 AS figure, pfc_xoff_p7 AS context
FROM v_ifaces WHERE pfc_xoff_peak_1s_p7 > ${pfc_storm_xoff_per_s}
