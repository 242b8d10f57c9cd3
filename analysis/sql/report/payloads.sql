-- Keys with data packets by their largest UDP payload.
SELECT max_payload, COUNT(*) AS qps FROM (
  SELECT host, iface, dir, src, dst, qp, MAX(max_udp_payload) AS max_payload FROM v_flows
  GROUP BY host, iface, dir, src, dst, qp HAVING SUM(data_pkts) > 0
) k
GROUP BY max_payload
ORDER BY max_payload
