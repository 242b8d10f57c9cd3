-- roce-analyze html: per interface of ${ifaces} and bucket of ${bucket_us} µs from ${origin_us}
-- (one interval per bucket unless the run has more intervals than points per chart): XOFF
-- frames per priority, XOFF per second (the frames over the bucket's length), seconds paused
-- (pfc_paused_s: the union of pause windows, null without a link speed), 802.3x PAUSE frames.
SELECT host, iface, MIN(t0) AS t0, MAX(t1) AS t1,
  COALESCE(SUM(pfc_xoff_p0), 0) AS xoff_p0, CAST(SUM(pfc_xoff_p0) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS xoff_per_s_p0, SUM(pfc_paused_s_p0) AS paused_s_p0,
  COALESCE(SUM(pfc_xoff_p1), 0) AS xoff_p1, CAST(SUM(pfc_xoff_p1) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS xoff_per_s_p1, SUM(pfc_paused_s_p1) AS paused_s_p1,
  COALESCE(SUM(pfc_xoff_p2), 0) AS xoff_p2, CAST(SUM(pfc_xoff_p2) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS xoff_per_s_p2, SUM(pfc_paused_s_p2) AS paused_s_p2,
  COALESCE(SUM(pfc_xoff_p3), 0) AS xoff_p3, CAST(SUM(pfc_xoff_p3) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS xoff_per_s_p3, SUM(pfc_paused_s_p3) AS paused_s_p3,
  COALESCE(SUM(pfc_xoff_p4), 0) AS xoff_p4, CAST(SUM(pfc_xoff_p4) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS xoff_per_s_p4, SUM(pfc_paused_s_p4) AS paused_s_p4,
  COALESCE(SUM(pfc_xoff_p5), 0) AS xoff_p5, CAST(SUM(pfc_xoff_p5) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS xoff_per_s_p5, SUM(pfc_paused_s_p5) AS paused_s_p5,
  COALESCE(SUM(pfc_xoff_p6), 0) AS xoff_p6, CAST(SUM(pfc_xoff_p6) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS xoff_per_s_p6, SUM(pfc_paused_s_p6) AS paused_s_p6,
  COALESCE(SUM(pfc_xoff_p7), 0) AS xoff_p7, CAST(SUM(pfc_xoff_p7) AS DOUBLE) * 1e6 / NULLIF(MAX(t1) - MIN(t0), 0) AS xoff_per_s_p7, SUM(pfc_paused_s_p7) AS paused_s_p7,
  COALESCE(SUM(pause_frames), 0) AS pause_frames
FROM v_ifaces
WHERE ${ifaces}
GROUP BY host, iface, (t0 - ${origin_us}) / ${bucket_us}
ORDER BY host, iface, t0
