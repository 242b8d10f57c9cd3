-- One row per host of the trees (any table), its NIC-side and host-QP figures over the run:
-- what `roce-analyze hosts` judges each host by (docs/analysis.md#hosts). The per-priority
-- sums are generated from the nic table's columns (${rdma_drops}: receive drops on the RDMA
-- priority; ${other_drops}: on the other priorities and at the port; ${pfc_rdma} /
-- ${pfc_other}: PFC frames received and sent on the RDMA priority / the others; ${*_known}:
-- whether the NIC reported any of them in the row).
WITH nic AS (
  SELECT host,
    COUNT(*) AS nic_rows,
    COUNT(DISTINCT iface) AS ifaces,
    MIN(driver) AS driver,
    MAX(driver) AS driver_max,
    SUM(CASE WHEN ${drops_known} THEN 1 ELSE 0 END) AS drops_known,
    SUM(CASE WHEN ${pfc_known} THEN 1 ELSE 0 END) AS pfc_known,
    SUM(CASE WHEN ${errors_known} THEN 1 ELSE 0 END) AS errors_known,
    SUM(${rdma_drops}) AS rdma_drops,
    SUM(${other_drops}) AS other_drops,
    SUM(${pfc_rdma}) AS pfc_rdma,
    SUM(${pfc_other}) AS pfc_other,
    SUM(COALESCE(pause_storm_events, 0) + COALESCE(pause_storm_tx_disabled, 0)
      + COALESCE(pause_storm_roce_events, 0)) AS storms,
    SUM(COALESCE(global_pause_rx_frames, 0) + COALESCE(global_pause_tx_frames, 0)) AS pause_frames,
    SUM(COALESCE(out_of_sequence, 0) + COALESCE(nak_seq_err_rx, 0)
      + COALESCE(implied_nak_seq_err, 0)) AS seq_errors,
    SUM(COALESCE(rdma_rx_out_of_buffer, 0)) AS no_buffer,
    SUM(COALESCE(ack_timeouts, 0)) AS ack_timeouts,
    SUM(COALESCE(cnp_sent, 0)) AS cnp_sent,
    SUM(COALESCE(counter_resets, 0)) AS counter_resets,
    MIN(t0) AS first_t0,
    MAX(t1) AS last_t1
  FROM v_nic
  GROUP BY host
),
cfg AS (
  SELECT host, COUNT(DISTINCT rule) AS config_failed, MIN(rule) AS config_first
  FROM v_alerts
  WHERE rule LIKE 'config%'
  GROUP BY host
),
qp AS (
  SELECT host,
    COUNT(DISTINCT CONCAT(device, '/', CAST(lqpn AS STRING))) AS host_qps,
    COUNT(DISTINCT CASE WHEN error THEN CONCAT(device, '/', CAST(lqpn AS STRING)) END) AS qp_errors,
    COUNT(DISTINCT CASE WHEN marking IN ('off_policy', 'lossy')
      THEN CONCAT(device, '/', CAST(lqpn AS STRING)) END) AS qp_off_policy
  FROM v_qps
  GROUP BY host
),
hosts AS (
  SELECT host FROM v_nic
  UNION SELECT host FROM v_qps
  UNION SELECT host FROM v_alerts
  UNION SELECT host FROM v_ifaces
)
SELECT h.host,
  COALESCE(n.nic_rows, 0) AS nic_rows, COALESCE(n.ifaces, 0) AS ifaces,
  n.driver, n.driver_max,
  COALESCE(n.drops_known, 0) AS drops_known, COALESCE(n.pfc_known, 0) AS pfc_known,
  COALESCE(n.errors_known, 0) AS errors_known,
  COALESCE(n.rdma_drops, 0) AS rdma_drops, COALESCE(n.other_drops, 0) AS other_drops,
  COALESCE(n.pfc_rdma, 0) AS pfc_rdma, COALESCE(n.pfc_other, 0) AS pfc_other,
  COALESCE(n.storms, 0) AS storms, COALESCE(n.pause_frames, 0) AS pause_frames,
  COALESCE(n.seq_errors, 0) AS seq_errors, COALESCE(n.ack_timeouts, 0) AS ack_timeouts,
  COALESCE(n.no_buffer, 0) AS no_buffer,
  COALESCE(n.cnp_sent, 0) AS cnp_sent, COALESCE(n.counter_resets, 0) AS counter_resets,
  n.first_t0, n.last_t1,
  COALESCE(c.config_failed, 0) AS config_failed, c.config_first,
  COALESCE(q.host_qps, 0) AS host_qps, COALESCE(q.qp_errors, 0) AS qp_errors,
  COALESCE(q.qp_off_policy, 0) AS qp_off_policy
FROM hosts h
LEFT JOIN nic n ON n.host = h.host
LEFT JOIN cfg c ON c.host = h.host
LEFT JOIN qp q ON q.host = h.host
ORDER BY h.host
