-- Columns of every check query (one row per violation, as the alert rule would fire it):
-- part, host, iface, dir, src, dst, qp (null where the rule is not per key), t0, t1 (the
-- interval, µs), figure (the count that breaks the rule), context (what it is set against).
-- The host's QPs (the qps table, docs/qps.md), per read: qp_off_policy and qp_lossy (the
-- qp_marking alert: figure the packets the QP sent in the interval, context those it received)
-- and qp_error (the QP in ERR or SQE: figure 1); iface is the RDMA device, src the owner
-- (comm[pid], with the pod or container), dst the peer (rdma_cm destination, else the GID), qp
-- the local QP number. owner_off_policy: per owner and read, the QPs off the policy or lossy
-- (figure), with the packets they sent (context): the processes and containers to fix.
SELECT CASE WHEN error THEN 'qp_error' ELSE CONCAT('qp_', marking) END AS part,
  host, device AS iface, CAST(NULL AS STRING) AS dir,
  CONCAT(COALESCE(comm, '-'), '[', COALESCE(CAST(pid AS STRING), '-'), ']',
    CASE WHEN pod_uid IS NOT NULL THEN CONCAT(' pod ', pod_uid)
      WHEN container_id IS NOT NULL THEN CONCAT(' container ', container_id) ELSE '' END) AS src,
  COALESCE(dst, dgid) AS dst, CAST(lqpn AS INT) AS qp, t0, t1,
  CASE WHEN error THEN 1 ELSE COALESCE(tx_pkts, 0) END AS figure, COALESCE(rx_pkts, 0) AS context
FROM v_qps
WHERE error OR marking IN ('off_policy', 'lossy')
UNION ALL
SELECT 'owner_off_policy' AS part, host, iface, CAST(NULL AS STRING) AS dir, src,
  CAST(NULL AS STRING) AS dst, CAST(NULL AS INT) AS qp, t0, MAX(t1) AS t1, COUNT(*) AS figure,
  SUM(COALESCE(tx_pkts, 0)) AS context
FROM (
  SELECT host, device AS iface, t0, t1, tx_pkts,
    CONCAT(COALESCE(comm, '-'), '[', COALESCE(CAST(pid AS STRING), '-'), ']',
      CASE WHEN pod_uid IS NOT NULL THEN CONCAT(' pod ', pod_uid)
        WHEN container_id IS NOT NULL THEN CONCAT(' container ', container_id) ELSE '' END) AS src
  FROM v_qps
  WHERE marking IN ('off_policy', 'lossy')
) o
GROUP BY host, iface, src, t0
