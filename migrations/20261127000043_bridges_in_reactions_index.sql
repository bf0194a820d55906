-- The correlator's bridge reactor reads AlertBridged events (an alert relating as strongly to
-- several open incidents): the reactions index holds every event type a reactor reads.
DROP INDEX events_tail_reactions;
CREATE INDEX events_tail_reactions ON events (aggregate_type, transaction_id, global_position)
    WHERE event_type IN ('IncidentOpened', 'ResolutionRequested', 'AlertBridged');
