-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- ce_without_cnp: per interface, interval and IP pair A->B (both directions of the interface
-- summed), at least ${ce_min} CE-marked data packets while B->A sent packets but no CNP.
-- figure: CE-marked data packets A->B, context: packets B->A.
WITH p AS (
  SELECT host, iface, t0, MAX(t1) AS t1, src, dst, SUM(ce) AS ce, SUM(cnp) AS cnp, SUM(pkts) AS pkts
  FROM (
    SELECT host, iface, t0, t1, src, dst, 0 AS ce, cnp, pkts FROM v_flows
    UNION ALL
    SELECT host, iface, t0, t1, src, dst, pkts AS ce, 0 AS cnp, 0 AS pkts FROM v_hist
    WHERE hist = 'ecn_data' AND value = 3
  ) x
  GROUP BY host, iface, t0, src, dst
)
SELECT 'ce_without_cnp' AS part, a.host, a.iface, CAST(NULL AS STRING) AS dir, a.src, a.dst, CAST(NULL AS INT) AS qp,
  a.t0, a.t1, a.ce AS figure, b.pkts AS context
FROM p a
JOIN p b ON b.host = a.host AND b.iface = a.iface AND b.t0 = a.t0 AND b.src = a.dst AND b.dst = a.src
WHERE a.ce >= ${ce_min} AND b.cnp = 0 AND b.pkts > 0
