-- Most incident events are appended by placement, which applies them to the incidents read model
-- in the same transaction: `projected` says so (other writers leave it false). The projection's
-- tail, which only has to find what a command path missed, then reads the unprojected events
-- alone, through an index that holds nothing else; before, it read every event of an alert
-- storm a second time to find nothing to do.
ALTER TABLE events ADD COLUMN projected boolean NOT NULL DEFAULT false;
CREATE INDEX events_tail_unprojected ON events (aggregate_type, transaction_id, global_position)
    WHERE NOT projected;
-- The reactors and the embeddings consumer each want one rare event type. This index holds only
-- those events, so that their tails read them alone rather than scanning every event for them.
-- A consumer of any other type still works (through `events_tail_by_type`), but reads slowly:
-- tests check that every consumer's types are listed here.
CREATE INDEX events_tail_reactions ON events (aggregate_type, transaction_id, global_position)
    WHERE event_type IN ('IncidentOpened', 'ResolutionRequested');
