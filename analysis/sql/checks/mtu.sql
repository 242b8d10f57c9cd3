-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- mtu_below_expected: a key whose multi-packet messages (FIRST / MIDDLE opcodes: their payload
-- is the path MTU) stay below the expected MTU's payload (${mtu_payload} bytes; 0: not checked).
-- A key whose largest message fits one packet has no such opcode and is never reported, nor is a
-- largest payload below the smallest RoCE MTU's (256 + 16 bytes): that is no path MTU.
-- figure: FIRST / MIDDLE packets in the interval, context: the largest UDP payload so far.
SELECT 'mtu_below_expected' AS part, host, iface, dir, src, dst, qp, t0, MAX(t1) AS t1,
  SUM(pkts) AS figure, CAST(MAX(max_udp_payload) AS BIGINT) AS context
FROM v_hist
WHERE ${mtu_payload} > 0 AND hist = 'opcodes' AND value IN (0, 1, 6, 7, 13, 14, 32, 33, 38, 39) AND pkts > 0
  AND max_udp_payload < ${mtu_payload} AND max_udp_payload >= 272
GROUP BY host, iface, dir, point, src, dst, qp, t0
