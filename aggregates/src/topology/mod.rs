//! A user's service topology as declared (one stream per user, named by the user id): the
//! catalog `PUT /api/topology` replaces. What is learned from merges, splits and alerts naming
//! other services is a projection of the incidents' events, not part of this aggregate.

mod catalog;
#[cfg(test)]
mod tests;

pub use catalog::{
    name_key, Address, Catalog, CatalogError, DeclaredService, MAX_ADDRESSES, MAX_ALIASES, MAX_DEPENDENCIES,
    MAX_NAME_CHARS, MAX_SERVICES,
};

use chrono::{DateTime, Utc};
use cqrs_es::{event_sink::EventSink, Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq)]
pub enum TopologyCommand {
    /// Replaces the user's catalog (an empty one clears it).
    Declare {
        user_id: String,
        catalog: Catalog,
        at: DateTime<Utc>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TopologyEvent {
    CatalogDeclared {
        user_id: String,
        catalog: Catalog,
        at: DateTime<Utc>,
    },
}

impl DomainEvent for TopologyEvent {
    fn event_type(&self) -> String {
        match self {
            Self::CatalogDeclared { .. } => "CatalogDeclared".to_owned(),
        }
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// The stream is another user's (its id is its owner's).
    #[error("topology not found")]
    NotFound,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Topology {
    user_id: Option<String>,
    catalog: Catalog,
}

impl Topology {
    pub fn decide(&self, command: TopologyCommand) -> Result<Vec<TopologyEvent>, TopologyError> {
        match command {
            TopologyCommand::Declare { user_id, catalog, at } => {
                if self.user_id.as_ref().is_some_and(|owner| *owner != user_id) {
                    return Err(TopologyError::NotFound);
                }
                // The same catalog again changes nothing: PUT is idempotent.
                if self.user_id.is_some() && self.catalog == catalog {
                    return Ok(Vec::new());
                }
                Ok(vec![TopologyEvent::CatalogDeclared { user_id, catalog, at }])
            }
        }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }
}

impl Aggregate for Topology {
    const TYPE: &'static str = "Topology";
    type Command = TopologyCommand;
    type Event = TopologyEvent;
    type Error = TopologyError;
    type Services = ();

    async fn handle(
        &mut self,
        command: Self::Command,
        _: &Self::Services,
        sink: &EventSink<Self>,
    ) -> Result<(), Self::Error> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
        match event {
            TopologyEvent::CatalogDeclared { user_id, catalog, .. } => {
                self.user_id = Some(user_id);
                self.catalog = catalog;
            }
        }
    }
}
