//! What a batch decided: the commands per incident, where each alert went, and the fates
//! recorded beside the incidents' events.

use std::collections::HashMap;

use uuid::Uuid;
use vigil_aggregates::{incident::IncidentCommand, received_alert::ReceivedAlertCommand};

use super::{fates::Redelivery, item::Item};
use crate::metrics::{AlertTally, Fate};

#[derive(Default)]
pub(super) struct Plan {
    /// Commands per incident, incidents in the order first commanded.
    pub(super) commands: Vec<(Uuid, Vec<IncidentCommand>)>,
    /// Incidents the batch opens.
    pub(super) opened: Vec<Uuid>,
    pub(super) placements: Vec<Placement>,
    /// Recoveries recorded before any incident held their alert (delivered ahead of its firing),
    /// delivered again now that one does: each row's id and the incident it now resolves.
    pub(super) adoptions: Vec<(i64, Uuid)>,
    /// Fates no incident's events record (silenced, unmatched, updated, redelivered): each
    /// entry's id, and the command recording it on the entry's own stream.
    pub(super) recorded: Vec<(i64, ReceivedAlertCommand)>,
    /// Deliveries received before (or earlier in the batch), each to be recorded as an entry.
    pub(super) redelivered: Vec<Redelivery>,
    /// Alerts held by a grouping rule in an earlier batch, released into the incident their
    /// group opened: each delivery's id and that incident.
    pub(super) released: Vec<(i64, Uuid)>,
    /// Alerts this batch held: each delivery's id and its placement's position in `placements`.
    pub(super) held_here: HashMap<i64, usize>,
    pub(super) tally: AlertTally,
}

impl Plan {
    /// A later firing or recovery of a flapping key: recorded on the incident it flaps in, where
    /// it opens, joins and resolves nothing.
    pub(super) fn flap(&mut self, item: &Item, alert_id: i64, incident_id: Uuid) -> Option<(Uuid, bool)> {
        self.command(incident_id, item.record_flap(alert_id));
        self.tally.count(item.alert.source, Fate::Flapping);
        Some((incident_id, false))
    }

    pub(super) fn command(&mut self, incident_id: Uuid, command: IncidentCommand) {
        match self.commands.iter_mut().find(|(id, _)| *id == incident_id) {
            Some((_, commands)) => commands.push(command),
            None => self.commands.push((incident_id, vec![command])),
        }
    }
}

/// Item index, its alert id, and the incident it went to (with whether it correlated).
pub(super) type Placement = (usize, i64, Option<(Uuid, bool)>);
