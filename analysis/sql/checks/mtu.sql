-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- mtu_below_expected: a key whose multi-packet messages (FIRST / MIDDLE opcodes: their payload
-- is the path MTU) stay below the expected MTU's payload (${mtu_payload} bytes; 0: not checked).
-- A key whose largest message fits one packet has no such opcode and is never reported.
-- figure: FIRST / MIDDLE packets in the interval, context: the largest UDP payload so far.
SELECT 'mtu_below_expected' AS part, f.host, f.iface, f.dir, f.src, f.dst, f.qp, f.t0, f.t1,
  m.pkts AS figure, CAST(f.max_udp_payload AS BIGINT) AS context
FROM v_flows f
JOIN (
  SELECT host, iface, dir, src, dst, qp, t0, SUM(pkts) AS pkts
  FROM v_hist
  WHERE hist = 'opcodes' AND value IN (0, 1, 6, 7, 13, 14, 32, 33, 38, 39) AND pkts > 0
  GROUP BY host, iface, dir, src, dst, qp, t0
) m ON m.host = f.host AND m.iface = f.iface AND m.dir = f.dir AND m.src = f.src
  AND m.dst = f.dst AND m.qp = f.qp AND m.t0 = f.t0
WHERE ${mtu_payload} > 0 AND f.max_udp_payload < ${mtu_payload}
