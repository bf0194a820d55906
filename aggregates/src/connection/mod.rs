//! A user's connection to one account of a cloud provider (spec Connection, Connection status).
//!
//! The aggregate id is derived from (user, provider, account), so each account of a provider is
//! tracked separately. Credentials are not part of the domain: events carry only the reference
//! to them in the secrets store.

#[cfg(test)]
mod tests;

use std::{fmt, str::FromStr};

use chrono::{DateTime, Utc};
use cqrs_es::{event_sink::EventSink, Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};

pub const MAX_ACCOUNT_ID_CHARS: usize = 255;
pub const MAX_ACCOUNT_NAME_CHARS: usize = 255;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    CloudA,
    CloudB,
    CloudC,
    CloudD,
    CloudE,
    CloudF,
}

impl Provider {
    pub const ALL: [Provider; 6] = [
        Provider::CloudA,
        Provider::CloudB,
        Provider::CloudC,
        Provider::CloudD,
        Provider::CloudE,
        Provider::CloudF,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::CloudA => "cloud_a",
            Self::CloudB => "cloud_b",
            Self::CloudC => "cloud_c",
            Self::CloudD => "cloud_d",
            Self::CloudE => "cloud_e",
            Self::CloudF => "cloud_f",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider {0:?}; expected one of cloud_a, cloud_b, cloud_c, cloud_d, cloud_e, cloud_f")]
pub struct UnknownProvider(pub String);

impl FromStr for Provider {
    type Err = UnknownProvider;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|provider| provider.as_str() == s)
            .ok_or_else(|| UnknownProvider(s.to_owned()))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionStatus {
    #[default]
    NotConnected,
    Pending,
    Connected,
    Error,
}

impl ConnectionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotConnected => "not_connected",
            Self::Pending => "pending",
            Self::Connected => "connected",
            Self::Error => "error",
        }
    }
}

/// The aggregate id of the connection of `user_id` to `account_id` of `provider`: a JSON array
/// of the three, which no other triple shares whatever characters the ids contain.
pub fn connection_id(user_id: &str, provider: Provider, account_id: &str) -> String {
    serde_json::to_string(&[user_id, provider.as_str(), account_id]).expect("strings serialise")
}

#[derive(Clone, Debug, PartialEq)]
pub enum ConnectionCommand {
    /// Setup has started (OAuth done, post-auth tasks running).
    Begin {
        user_id: String,
        provider: Provider,
        account_id: String,
        account_name: Option<String>,
        at: DateTime<Utc>,
    },
    /// Credentials are stored (under `secret_ref`) and access was validated.
    Connect {
        user_id: String,
        provider: Provider,
        account_id: String,
        account_name: Option<String>,
        secret_ref: String,
        at: DateTime<Utc>,
    },
    /// A setup that began the connection has finished: the connection becomes `connected` if it
    /// is still pending. One the user disconnected (or that failed) meanwhile stays as it is.
    CompleteSetup {
        user_id: String,
        secret_ref: String,
        at: DateTime<Utc>,
    },
    /// The credentials stopped working; the user must reconnect.
    Fail {
        user_id: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// `credentials_kept`: the generic disconnect keeps them, a provider's own disconnect deletes them.
    /// Idempotent: disconnecting what is not connected (or never was) changes nothing.
    Disconnect {
        user_id: String,
        credentials_kept: bool,
        at: DateTime<Utc>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConnectionEvent {
    ConnectionPending {
        user_id: String,
        provider: Provider,
        account_id: String,
        account_name: Option<String>,
        at: DateTime<Utc>,
    },
    ConnectionEstablished {
        user_id: String,
        provider: Provider,
        account_id: String,
        account_name: Option<String>,
        secret_ref: String,
        at: DateTime<Utc>,
    },
    ConnectionFailed {
        reason: String,
        at: DateTime<Utc>,
    },
    ConnectionDisconnected {
        credentials_kept: bool,
        at: DateTime<Utc>,
    },
}

impl ConnectionEvent {
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::ConnectionPending { at, .. }
            | Self::ConnectionEstablished { at, .. }
            | Self::ConnectionFailed { at, .. }
            | Self::ConnectionDisconnected { at, .. } => *at,
        }
    }

    /// The status the connection has after this event.
    pub fn status(&self) -> ConnectionStatus {
        match self {
            Self::ConnectionPending { .. } => ConnectionStatus::Pending,
            Self::ConnectionEstablished { .. } => ConnectionStatus::Connected,
            Self::ConnectionFailed { .. } => ConnectionStatus::Error,
            Self::ConnectionDisconnected { .. } => ConnectionStatus::NotConnected,
        }
    }
}

impl DomainEvent for ConnectionEvent {
    fn event_type(&self) -> String {
        match self {
            Self::ConnectionPending { .. } => "ConnectionPending",
            Self::ConnectionEstablished { .. } => "ConnectionEstablished",
            Self::ConnectionFailed { .. } => "ConnectionFailed",
            Self::ConnectionDisconnected { .. } => "ConnectionDisconnected",
        }
        .to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// Unknown, or another user's connection: indistinguishable to the caller.
    #[error("connection not found")]
    NotFound,
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Connection {
    created: bool,
    user_id: String,
    provider: Option<Provider>,
    account_id: String,
    account_name: Option<String>,
    secret_ref: Option<String>,
    status: ConnectionStatus,
}

impl Connection {
    pub fn status(&self) -> ConnectionStatus {
        self.status
    }

    fn owned_by(&self, user_id: &str) -> Result<&Self, ConnectionError> {
        if !self.created || self.user_id != user_id {
            return Err(ConnectionError::NotFound);
        }
        Ok(self)
    }

    /// A new connection takes any owner; an existing one only its own, for the same account.
    fn check_identity(&self, user_id: &str, provider: Provider, account_id: &str) -> Result<(), ConnectionError> {
        if user_id.trim().is_empty() {
            return Err(ConnectionError::Invalid("a connection needs an owner".into()));
        }
        check_account_id(account_id)?;
        if self.created && (self.user_id != user_id || self.provider != Some(provider) || self.account_id != account_id)
        {
            return Err(ConnectionError::NotFound);
        }
        Ok(())
    }

    fn decide(&self, command: ConnectionCommand) -> Result<Vec<ConnectionEvent>, ConnectionError> {
        use ConnectionCommand as C;
        use ConnectionEvent as E;
        match command {
            C::Begin {
                user_id,
                provider,
                account_id,
                account_name,
                at,
            } => {
                self.check_identity(&user_id, provider, &account_id)?;
                let account_name = checked_name(account_name)?;
                if self.created && self.status == ConnectionStatus::Pending && self.account_name == account_name {
                    return Ok(vec![]);
                }
                Ok(vec![E::ConnectionPending {
                    user_id,
                    provider,
                    account_id,
                    account_name,
                    at,
                }])
            }
            C::Connect {
                user_id,
                provider,
                account_id,
                account_name,
                secret_ref,
                at,
            } => {
                self.check_identity(&user_id, provider, &account_id)?;
                let account_name = checked_name(account_name)?;
                if secret_ref.trim().is_empty() {
                    return Err(ConnectionError::Invalid("a connection needs stored credentials".into()));
                }
                let unchanged = self.created
                    && self.status == ConnectionStatus::Connected
                    && self.account_name == account_name
                    && self.secret_ref.as_deref() == Some(secret_ref.as_str());
                if unchanged {
                    return Ok(vec![]);
                }
                Ok(vec![E::ConnectionEstablished {
                    user_id,
                    provider,
                    account_id,
                    account_name,
                    secret_ref,
                    at,
                }])
            }
            C::CompleteSetup {
                user_id,
                secret_ref,
                at,
            } => {
                let connection = self.owned_by(&user_id)?;
                if secret_ref.trim().is_empty() {
                    return Err(ConnectionError::Invalid("a connection needs stored credentials".into()));
                }
                let Some(provider) = connection
                    .provider
                    .filter(|_| connection.status == ConnectionStatus::Pending)
                else {
                    return Ok(vec![]);
                };
                Ok(vec![E::ConnectionEstablished {
                    user_id,
                    provider,
                    account_id: connection.account_id.clone(),
                    account_name: connection.account_name.clone(),
                    secret_ref,
                    at,
                }])
            }
            C::Fail { user_id, reason, at } => {
                let connection = self.owned_by(&user_id)?;
                // Only a connection in use can break; a disconnected one has nothing to fail.
                if matches!(
                    connection.status,
                    ConnectionStatus::Error | ConnectionStatus::NotConnected
                ) {
                    return Ok(vec![]);
                }
                Ok(vec![E::ConnectionFailed { reason, at }])
            }
            C::Disconnect {
                user_id,
                credentials_kept,
                at,
            } => {
                // Any state goes to not_connected, including none: a connection that never
                // existed already is, and there is nothing to record.
                if !self.created {
                    return Ok(vec![]);
                }
                let connection = self.owned_by(&user_id)?;
                // Disconnecting twice changes nothing, unless the credentials are now deleted too.
                if connection.status == ConnectionStatus::NotConnected && credentials_kept {
                    return Ok(vec![]);
                }
                Ok(vec![E::ConnectionDisconnected { credentials_kept, at }])
            }
        }
    }
}

/// The account id rule of `Connect` and `Reconnect`, for callers that check before they store anything.
pub fn check_account_id(account_id: &str) -> Result<(), ConnectionError> {
    if account_id.trim().is_empty() || account_id.chars().count() > MAX_ACCOUNT_ID_CHARS {
        return Err(ConnectionError::Invalid(format!(
            "account_id must be 1 to {MAX_ACCOUNT_ID_CHARS} characters"
        )));
    }
    Ok(())
}

/// The account name rule of `Connect` and `Reconnect`: trimmed, blank as none, at most
/// [`MAX_ACCOUNT_NAME_CHARS`].
pub fn checked_name(name: Option<String>) -> Result<Option<String>, ConnectionError> {
    let name = name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    if name
        .as_ref()
        .is_some_and(|n| n.chars().count() > MAX_ACCOUNT_NAME_CHARS)
    {
        return Err(ConnectionError::Invalid(format!(
            "account_name must be at most {MAX_ACCOUNT_NAME_CHARS} characters"
        )));
    }
    Ok(name)
}

impl Aggregate for Connection {
    const TYPE: &'static str = "Connection";
    type Command = ConnectionCommand;
    type Event = ConnectionEvent;
    type Error = ConnectionError;
    type Services = ();

    async fn handle(
        &mut self,
        command: Self::Command,
        _services: &Self::Services,
        sink: &EventSink<Self>,
    ) -> Result<(), Self::Error> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
        use ConnectionEvent as E;
        self.status = event.status();
        match event {
            E::ConnectionPending {
                user_id,
                provider,
                account_id,
                account_name,
                ..
            } => {
                self.created = true;
                self.user_id = user_id;
                self.provider = Some(provider);
                self.account_id = account_id;
                self.account_name = account_name;
            }
            E::ConnectionEstablished {
                user_id,
                provider,
                account_id,
                account_name,
                secret_ref,
                ..
            } => {
                self.created = true;
                self.user_id = user_id;
                self.provider = Some(provider);
                self.account_id = account_id;
                self.account_name = account_name;
                self.secret_ref = Some(secret_ref);
            }
            E::ConnectionFailed { .. } => {}
            E::ConnectionDisconnected { credentials_kept, .. } => {
                if !credentials_kept {
                    self.secret_ref = None;
                }
            }
        }
    }
}
