//! How risky a proposed shell command is. Anything not known to be read-only is at least
//! `medium`; destructive verbs are `high`. A command is never called safe by default.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Read-only.
    Safe,
    /// May change resources.
    Medium,
    /// Destructive or expensive.
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Safe => "safe",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

/// kubectl / cloud CLI verbs that only read.
const READ_ONLY: &[&str] = &[
    "get", "describe", "logs", "top", "list", "show", "history", "status", "explain", "events", "version",
];
/// Verbs that delete, replace or roll back.
const DESTRUCTIVE: &[&str] = &[
    "delete",
    "destroy",
    "undo",
    "drain",
    "terminate",
    "rm",
    "purge",
    "replace",
    "cordon",
    "evict",
];

pub fn classify(command: &str) -> Risk {
    // Pipes and redirects are judged by every part: `get ... | xargs delete` is destructive.
    let words: Vec<String> = command
        .split(|c: char| c.is_whitespace() || c == '|' || c == ';' || c == '&')
        .filter(|word| !word.is_empty() && !word.starts_with('-'))
        .map(str::to_ascii_lowercase)
        .collect();
    if command.contains('>') || words.iter().any(|word| DESTRUCTIVE.contains(&word.as_str())) {
        return Risk::High;
    }
    let cli_verbs = words.iter().skip(1).take(3);
    let reads = cli_verbs.clone().any(|word| READ_ONLY.contains(&word.as_str()))
        && !words.iter().any(|word| {
            matches!(
                word.as_str(),
                "apply" | "patch" | "scale" | "restart" | "set" | "edit" | "create" | "xargs"
            )
        });
    if reads {
        Risk::Safe
    } else {
        Risk::Medium
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let cases = [
            ("kubectl -n checkout get pods -l app=checkout-api -o wide", Risk::Safe),
            (
                "kubectl -n checkout logs deployment/checkout-api --since=30m",
                Risk::Safe,
            ),
            (
                "kubectl -n checkout rollout history deployment/checkout-api",
                Risk::Safe,
            ),
            ("kubectl -n checkout rollout undo deployment/checkout-api", Risk::High),
            (
                "kubectl -n checkout rollout restart deployment/checkout-api",
                Risk::Medium,
            ),
            (
                "kubectl -n checkout scale deployment/checkout-api --replicas=6",
                Risk::Medium,
            ),
            ("kubectl get pods -o name | xargs kubectl delete", Risk::High),
            ("kubectl get pods > /tmp/pods.txt", Risk::High),
            ("terraform apply", Risk::Medium),
            ("some-unknown-tool --flag", Risk::Medium),
        ];
        for (command, expected) in cases {
            assert_eq!(classify(command), expected, "{command}");
        }
    }
}
