-- The latency measurements that gave no sample, all keys and intervals: per kind unanswered
-- (timed out, a new incarnation, passed over), and the ACK / READ ones excluded by Karn's rule
-- or not started because the key's ring of outstanding requests was full.
SELECT SUM(latency_ack_unmatched) AS ack_unmatched, SUM(latency_read_unmatched) AS read_unmatched,
  SUM(latency_nak_resend_unmatched) AS nak_resend_unmatched,
  SUM(latency_ce_cnp_unmatched) AS ce_cnp_unmatched,
  SUM(latency_ambiguous) AS ambiguous, SUM(latency_ring_full) AS ring_full
FROM v_flows
