-- The latency distribution of every key and interval summed, per kind (ack, read, nak_resend,
-- ce_cnp): one row per bucket index (`value`: samples in (2^((value-1)/4), 2^(value/4)] s)
-- with its samples. The measurements that gave none are latency_lost.sql's.
SELECT kind, value, SUM(pkts) AS samples
FROM v_latency
WHERE pkts > 0
GROUP BY kind, value
ORDER BY kind, value
