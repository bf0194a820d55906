-- The chat's usage_info sums a session's model costs after every reply: look them up by session
-- instead of scanning every usage row.
CREATE INDEX llm_usage_by_session ON llm_usage (session_id) WHERE session_id IS NOT NULL;
