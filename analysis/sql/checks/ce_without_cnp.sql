-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- ce_without_cnp: per interface, interval and IP pair A->B (both directions of the interface
-- summed), at least ${ce_min} CE-marked data packets while B->A sent packets but no CNP.
-- figure: CE-marked data packets A->B, context: packets B->A. Only the pairs with enough CE are
-- grouped and looked up in the reverse direction, so memory follows the CE-marked pairs, not the rows.
WITH a AS (
  SELECT host, iface, t0, MAX(t1) AS t1, src, dst, SUM(pkts) AS ce
  FROM v_hist
  WHERE hist = 'ecn_data' AND value = 3 AND pkts > 0
  GROUP BY host, iface, t0, src, dst
  HAVING SUM(pkts) >= ${ce_min}
), b AS (
  SELECT a.host, a.iface, a.t0, a.src, a.dst, SUM(f.cnp) AS cnp, SUM(f.pkts) AS pkts
  FROM a
  JOIN v_flows f ON f.host = a.host AND f.iface = a.iface AND f.t0 = a.t0 AND f.src = a.dst AND f.dst = a.src
  GROUP BY a.host, a.iface, a.t0, a.src, a.dst
)
SELECT 'ce_without_cnp' AS part, a.host, a.iface, CAST(NULL AS STRING) AS dir, a.src, a.dst, CAST(NULL AS INT) AS qp,
  a.t0, a.t1, a.ce AS figure, b.pkts AS context
FROM a
JOIN b ON b.host = a.host AND b.iface = a.iface AND b.t0 = a.t0 AND b.src = a.src AND b.dst = a.dst
WHERE b.cnp = 0 AND b.pkts > 0
