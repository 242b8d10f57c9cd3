-- The views every report query reads (Apache Spark SQL): v_flows (the flows table with its interval as
-- µs since the epoch, t0 / t1), v_hist (one row per histogram bucket of a flows row, with t0 / t1: hist is
-- the column's name, value / pkts the bucket, class_pkts the row's packets of the histogram's class,
-- max_udp_payload the row's), v_ifaces (interfaces, with t0 / t1 and the time paused per priority), v_alerts.
-- The engine registers the tables flows, interfaces and alerts first (docs/analysis.md#sql).
-- Only this file differs between engines: the report queries (../checks, ../report) are the
-- same text everywhere.

CREATE OR REPLACE TEMP VIEW v_flows AS
SELECT host, iface, dir, point, src, dst, qp,
  unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1,
  pkts, data_pkts, ack_pkts, cnp, ce, not_ect_data, naks, rnr_naks,
  psn_gaps, psn_missing, psn_retrans, psn_behind, max_udp_payload
FROM flows;

CREATE OR REPLACE TEMP VIEW v_hist AS
SELECT host, iface, dir, point, src, dst, qp, t0, t1, hist, class_pkts, max_udp_payload, h.value AS value, h.pkts AS pkts FROM (
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'opcodes' AS hist, pkts AS class_pkts, max_udp_payload, explode(opcodes) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'dscp_data' AS hist, data_pkts AS class_pkts, max_udp_payload, explode(dscp_data) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'dscp_ack' AS hist, ack_pkts AS class_pkts, max_udp_payload, explode(dscp_ack) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'dscp_cnp' AS hist, cnp AS class_pkts, max_udp_payload, explode(dscp_cnp) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'ecn_data' AS hist, data_pkts AS class_pkts, max_udp_payload, explode(ecn_data) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'ecn_ack' AS hist, ack_pkts AS class_pkts, max_udp_payload, explode(ecn_ack) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'ecn_cnp' AS hist, cnp AS class_pkts, max_udp_payload, explode(ecn_cnp) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'pcp_data' AS hist, data_pkts AS class_pkts, max_udp_payload, explode(pcp_data) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'pcp_ack' AS hist, ack_pkts AS class_pkts, max_udp_payload, explode(pcp_ack) AS h FROM flows
  UNION ALL
  SELECT host, iface, dir, point, src, dst, qp, unix_micros(interval_start) AS t0, unix_micros(interval_end) AS t1, 'pcp_cnp' AS hist, cnp AS class_pkts, max_udp_payload, explode(pcp_cnp) AS h FROM flows
) u;

CREATE OR REPLACE TEMP VIEW v_ifaces AS
SELECT host,
  iface,
  dir,
  point,
  unix_micros(interval_start) AS t0,
  unix_micros(interval_end) AS t1,
  roce,
  pause_frames,
  qp_insert_failed,
  events_lost,
  pfc_xoff_p0,
  pfc_xon_p0,
  pfc_xoff_peak_1s_p0,
  pfc_xoff_p1,
  pfc_xon_p1,
  pfc_xoff_peak_1s_p1,
  pfc_xoff_p2,
  pfc_xon_p2,
  pfc_xoff_peak_1s_p2,
  pfc_xoff_p3,
  pfc_xon_p3,
  pfc_xoff_peak_1s_p3,
  pfc_xoff_p4,
  pfc_xon_p4,
  pfc_xoff_peak_1s_p4,
  pfc_xoff_p5,
  pfc_xon_p5,
  pfc_xoff_peak_1s_p5,
  pfc_xoff_p6,
  pfc_xon_p6,
  pfc_xoff_peak_1s_p6,
  pfc_xoff_p7,
  pfc_xon_p7,
  pfc_xoff_peak_1s_p7,
  excluded_runt,
  excluded_bad_ip_header,
  excluded_ip_fragment,
  excluded_short_bth,
  excluded_udp_src_port_only,
  excluded_truncated,
  pfc_paused_s_p0,
  pfc_paused_s_p1,
  pfc_paused_s_p2,
  pfc_paused_s_p3,
  pfc_paused_s_p4,
  pfc_paused_s_p5,
  pfc_paused_s_p6,
  pfc_paused_s_p7
FROM interfaces;

CREATE OR REPLACE TEMP VIEW v_alerts AS
SELECT host, iface, rule, severity, unix_micros(time) AS t FROM alerts;
