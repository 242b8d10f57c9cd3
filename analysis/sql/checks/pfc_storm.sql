-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- pfc_storm: the densest one-second window's XOFF frames of a priority above
-- ${pfc_storm_xoff_per_s}, per interface direction, priority and interval (v_pfc: one row per
-- priority). figure: that peak (XOFF/s), context: the interval's XOFF frames.
SELECT CONCAT('priority ', CAST(priority AS STRING)) AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pfc_xoff_peak_1s AS figure, pfc_xoff AS context
FROM v_pfc WHERE pfc_xoff_peak_1s > ${pfc_storm_xoff_per_s}
