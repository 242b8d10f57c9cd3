-- The host QPs that can send a wire key (docs/analysis.md#requested-at-the-host), as the body of
-- the CTE `sent` that requested.sql and requested_ranges.sql start with: every qps row of a
-- connected QP (RC, UC: its remote QP number and destination GID known) whose set-up was seen
-- (a traffic class, a byte). Such a QP's packets carry the key (src, dgid, rqpn): `qp` is the
-- key's destination QP, `dgid` its dst (IPv4 when v4-mapped, as the flows write it).
SELECT host, device, lqpn, CAST(rqpn AS INT) AS qp, dgid, t1, pid, comm, pod_uid, container_id,
  traffic_class, sl, setup_source
FROM v_qps
WHERE traffic_class BETWEEN 0 AND 255 AND rqpn BETWEEN 0 AND 16777215 AND dgid IS NOT NULL
