-- Alert records per rule.
SELECT rule, COUNT(*) AS alerts FROM v_alerts GROUP BY rule ORDER BY rule
