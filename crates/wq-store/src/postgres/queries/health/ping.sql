-- A cheap round trip for readiness.
SELECT 1
