//! cloud_b: AWS-like role assumption with an external ID.
//!
//! The user creates a role in their account that trusts the service's account on condition of an external
//! ID ([`external_id_for`]) and gives its ARN ([`RoleArn`]); the service then assumes it with STS
//! ([`StsClient::assume_role`]) for short-lived credentials, re-assumed when [`crate::needs_refresh`] says so.

mod arn;
mod external_id;
mod sts;

pub use arn::{RoleArn, RoleArnError};
pub use external_id::external_id_for;
pub use sts::{ServiceCredentials, StsClient, StsError, TemporaryCredentials};
