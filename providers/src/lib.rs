//! HTTP clients for the cloud providers that users connect to vigil.
//!
//! - [`cloud_b`]: AWS-like role assumption with an external ID (STS `AssumeRole`, SigV4-signed).
//! - [`cloud_c`]: Azure-like service principal (client-credentials token, subscription listing).
//! - [`cloud_d`]: Scaleway-like access key and secret key (organization detection, project listing).
//!
//! Every client has configurable base URLs and a request timeout, and its own error enum that separates
//! what the user got wrong (the caller answers 4xx) from what the provider did (the caller answers 502).
//! Credential values are held in [`Secret`] and never appear in an error message or a `Debug` output.
//!
//! With the `fake` feature, [`fake`] offers local HTTP servers speaking each provider's real shapes.

pub mod cloud_b;
pub mod cloud_c;
pub mod cloud_d;
#[cfg(feature = "fake")]
pub mod fake;
mod secret;
mod transport;

pub use secret::Secret;
pub use transport::{Unavailable, DEFAULT_TIMEOUT};

use chrono::{DateTime, TimeDelta, Utc};

/// How long before expiry short-lived credentials (STS credentials, access tokens) are renewed.
pub const REFRESH_MARGIN: TimeDelta = TimeDelta::minutes(5);

/// Whether credentials expiring at `expiration` must be renewed before use at `now`: true once they are
/// within [`REFRESH_MARGIN`] of expiry, and of course after it.
pub fn needs_refresh(expiration: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    expiration - now <= REFRESH_MARGIN
}
