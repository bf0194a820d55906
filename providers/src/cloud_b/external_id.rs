use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Separates this use of the workspace key from any other HMAC made with it.
const CONTEXT: &[u8] = b"vigil/cloud_b/external-id/v1\0";

/// The external ID that `user_id`'s roles must require: `vigil-` and 32 lowercase hex characters, within
/// STS's `[\w+=,.@:/-]{2,1224}`.
///
/// It is derived (HMAC-SHA256 of the user id under `workspace_secret_key`, truncated to 128 bits) rather
/// than generated and stored, because:
/// - the user must put it in the role's trust policy before the role exists, so it is shown before anything
///   about the connection is stored, and it must come out the same on every page load and every re-assumption;
/// - nothing can lose it or drift: no row to migrate, back up or keep in step with the secrets store;
/// - it is unique per user and unpredictable without the key, so no user can be handed (or guess) another's
///   and make the service assume someone else's role (the confused-deputy attack external IDs exist for).
///
/// The price: `workspace_secret_key` must never rotate, or every user's trust policy breaks at once. Use a
/// dedicated random key of at least 32 bytes for this alone. Never take the external ID from the request:
/// compute it here for the authenticated user and compare.
pub fn external_id_for(workspace_secret_key: &[u8], user_id: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(workspace_secret_key).expect("HMAC accepts keys of any length");
    mac.update(CONTEXT);
    mac.update(user_id.as_bytes());
    let digest = mac.finalize().into_bytes();
    format!("vigil-{}", hex::encode(&digest[..16]))
}
