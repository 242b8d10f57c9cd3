-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- pause_802_3x: 802.3x PAUSE frames, per interface direction and interval (figure: frames).
SELECT 'pause_802_3x' AS part, host, iface, dir, CAST(NULL AS STRING) AS src, CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, t1,
  pause_frames AS figure, roce AS context
FROM v_ifaces WHERE pause_frames > 0
