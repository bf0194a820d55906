-- The analysis's verdict and what it rests on (`VerdictRecorded`): shown as the incident
-- detail's `verdict`. Rebuilt by `vigil replay --projection incidents`.
ALTER TABLE incidents ADD COLUMN analysis_verdict jsonb;
