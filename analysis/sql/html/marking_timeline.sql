-- roce-analyze html: per interface of ${ifaces} and bucket of ${bucket_us} µs from ${origin_us}
-- (all QP keys, directions and classes): packets whose DSCP, PCP or ECN the policy does not
-- expect (${marking_off}), by field; b the bucket (as flow_timeline.sql's rows have it).
SELECT host, iface, (t0 - ${origin_us}) / ${bucket_us} AS b,
  SUM(CASE WHEN hist IN ('dscp_data', 'dscp_ack', 'dscp_cnp') THEN pkts ELSE 0 END) AS off_dscp,
  SUM(CASE WHEN hist IN ('pcp_data', 'pcp_ack', 'pcp_cnp') THEN pkts ELSE 0 END) AS off_pcp,
  SUM(CASE WHEN hist IN ('ecn_data', 'ecn_ack', 'ecn_cnp') THEN pkts ELSE 0 END) AS not_ect
FROM v_hist
WHERE ${ifaces}
  AND hist IN ('dscp_data', 'dscp_ack', 'dscp_cnp', 'pcp_data', 'pcp_ack', 'pcp_cnp', 'ecn_data', 'ecn_ack', 'ecn_cnp')
  AND ${marking_off} AND pkts > 0
GROUP BY host, iface, (t0 - ${origin_us}) / ${bucket_us}
ORDER BY host, iface, b
