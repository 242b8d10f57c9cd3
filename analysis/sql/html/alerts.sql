-- roce-analyze html: the alert records, the first ${limit} in time order.
SELECT host, iface, rule, severity, t FROM v_alerts ORDER BY t, host, iface, rule LIMIT ${limit}
