use std::fmt;
use std::str::FromStr;

const PREFIX: &str = "arn:aws:iam::";
const ACCOUNT_ID_LEN: usize = 12;
const MAX_ROLE_NAME_LEN: usize = 64;
const MAX_PATH_LEN: usize = 512;

/// The ARN of an IAM role: `arn:aws:iam::<12-digit account id>:role/<path/><role name>`.
///
/// The role name is 1 to 64 characters of letters, digits and `+=,.@_-`. The optional path between `role/`
/// and the name is made of non-empty segments of printable ASCII (IAM's own rule), at most 512 characters
/// with its slashes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RoleArn(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoleArnError {
    #[error("a role ARN has the form arn:aws:iam::<12-digit account id>:role/<role name>")]
    Format,
    #[error("the account id in a role ARN must be exactly 12 digits")]
    AccountId,
    #[error("a role name must be 1 to 64 characters of letters, digits and +=,.@_-")]
    RoleName,
    #[error("a role path must be at most 512 printable ASCII characters, without empty segments")]
    RolePath,
}

impl RoleArn {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 12-digit id of the account that owns the role.
    pub fn account_id(&self) -> &str {
        &self.0[PREFIX.len()..PREFIX.len() + ACCOUNT_ID_LEN]
    }

    /// The role name, without its path.
    pub fn role_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or_default()
    }
}

impl FromStr for RoleArn {
    type Err = RoleArnError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let rest = value.strip_prefix(PREFIX).ok_or(RoleArnError::Format)?;
        let (account_id, resource) = rest.split_once(':').ok_or(RoleArnError::Format)?;
        if account_id.len() != ACCOUNT_ID_LEN || !account_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RoleArnError::AccountId);
        }
        let path_and_name = resource.strip_prefix("role/").ok_or(RoleArnError::Format)?;
        let (path, name) = match path_and_name.rsplit_once('/') {
            Some((path, name)) => (Some(path), name),
            None => (None, path_and_name),
        };
        if name.is_empty() || name.len() > MAX_ROLE_NAME_LEN || !name.chars().all(is_role_name_char) {
            return Err(RoleArnError::RoleName);
        }
        // The path as IAM counts it includes its leading and trailing slash.
        let path_ok = path.is_none_or(|path| {
            path.len() + 2 <= MAX_PATH_LEN
                && path
                    .split('/')
                    .all(|segment| !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_graphic()))
        });
        if !path_ok {
            return Err(RoleArnError::RolePath);
        }
        Ok(Self(value.to_owned()))
    }
}

fn is_role_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_+=,.@-".contains(c)
}

impl fmt::Display for RoleArn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
