-- Per wire key (src, dst, qp) with packets and per host QP that sends it (`${sent}`, sent.sql):
-- the QP's latest set-up, from its rows of the last interval that has one (two different
-- set-ups there are two rows: shown, never chosen between); several QPs (hosts, devices)
-- sending one key are one row each. The keys are read from the flows once, one row per key, and
-- joined to the QPs (the build side): memory grows with keys and QPs, not with rows.
WITH sent AS (
${sent}
),
latest AS (
  SELECT host, device, lqpn, qp, dgid, MAX(t1) AS t1
  FROM sent
  GROUP BY host, device, lqpn, qp, dgid
),
asked AS (
  SELECT DISTINCT s.host, s.device, s.lqpn, s.qp, s.dgid, s.t1, s.pid, s.comm, s.pod_uid,
    s.container_id, s.traffic_class, s.sl, s.setup_source
  FROM latest l
  JOIN sent s ON s.host = l.host AND s.device = l.device AND s.lqpn = l.lqpn AND s.qp = l.qp
    AND s.dgid = l.dgid AND s.t1 = l.t1
),
keys AS (
  SELECT DISTINCT src, dst, qp FROM v_flows WHERE pkts > 0
)
SELECT k.src, k.dst, k.qp, a.host, a.device, a.lqpn, a.t1 AS seen_us, a.pid, a.comm, a.pod_uid,
  a.container_id, a.traffic_class, a.sl, a.setup_source
FROM asked a
JOIN keys k ON k.qp = a.qp AND k.dst = a.dgid
