-- The host QP inventory's extent: its rows (one per QP and read) and the QPs it saw (a QP:
-- host, device, local QP number).
SELECT COUNT(*) AS qp_rows, COUNT(DISTINCT CONCAT(host, '/', device, '/', CAST(lqpn AS STRING))) AS host_qps
FROM v_qps
