//! Strict mode's proof that a trusted gateway set `X-User-ID`:
//! `X-User-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<user id>")>`,
//! accepted within five minutes of `t`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const SIGNATURE_HEADER: &str = "x-user-signature";
const TOLERANCE_SECS: i64 = 300;

pub fn sign(secret: &str, user_id: &str, unix_time: i64) -> String {
    let mut mac = mac(secret);
    mac.update(format!("{unix_time}.{user_id}").as_bytes());
    format!("t={unix_time},v1={}", hex::encode(mac.finalize().into_bytes()))
}

pub fn verify(secret: &str, user_id: &str, header: &str, now_unix: i64) -> bool {
    let mut timestamp = None;
    let mut signature = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => timestamp = value.parse::<i64>().ok(),
            Some(("v1", value)) => signature = hex::decode(value).ok(),
            _ => {}
        }
    }
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return false;
    };
    if (now_unix - timestamp).abs() > TOLERANCE_SECS {
        return false;
    }
    let mut mac = mac(secret);
    mac.update(format!("{timestamp}.{user_id}").as_bytes());
    mac.verify_slice(&signature).is_ok()
}

fn mac(secret: &str) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_own_signature_and_rejects_tampering() {
        let header = sign("s3cret", "user-1", 1_000);
        assert!(verify("s3cret", "user-1", &header, 1_010));
        assert!(!verify("s3cret", "user-2", &header, 1_010), "other user");
        assert!(!verify("other", "user-1", &header, 1_010), "other secret");
        assert!(
            !verify("s3cret", "user-1", &header, 1_000 + TOLERANCE_SECS + 1),
            "stale"
        );
        assert!(!verify("s3cret", "user-1", "t=1000,v1=zz", 1_000), "garbage");
    }
}
