-- Every tail reads one aggregate type's events in (transaction_id, global_position) order. With
-- the type leading, that read is a range scan of its own events from the checkpoint on; the
-- index it replaces made each read filter the other types' events (or, as PostgreSQL planned it
-- on a young table, fetch every event of the type and sort them).
CREATE INDEX events_tail_by_type ON events (aggregate_type, transaction_id, global_position);
DROP INDEX events_tail_order;
