//! Which account of the monitoring tools an alert came from, and whether an incident's alerts
//! came from the same one.
//!
//! A tool's link names its account: the organisation's domain of a self-hosted Grafana or
//! Splunk, a paging tool's subdomain, a netdata space, a Datadog organisation, a Dynatrace
//! environment. A user who watches several organisations (a managed service provider, a
//! platform team serving business units) sees their failures at the same minutes; alerts of
//! different accounts are different systems. Within one account, the only open incident is the
//! likeliest home of a serious alert, as it is for a user with one incident open.
//!
//! An account is kept as an evidence key `acct:<name>` (an organisation's name, as a slug) or
//! `acct:<tool>#<id>` (an id that only the same tool's alerts can share).

use super::evidence::keys_with_prefix;

/// Prefix of account keys among evidence keys.
pub const ACCOUNT_PREFIX: &str = "acct:";

/// The evidence key of an account.
pub fn account_key(account: &str) -> String {
    format!("{ACCOUNT_PREFIX}{account}")
}

/// The (first) account among sorted evidence keys.
pub fn of(sorted_keys: &[String]) -> Option<&str> {
    accounts(sorted_keys).next()
}

/// How an alert's account compares with an incident's accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountFit {
    /// One of the incident's accounts is the alert's.
    Same,
    /// Both name an account of the same kind, and none agrees: another organisation.
    Foreign,
    /// One side names no account, or only accounts of kinds the other does not name.
    Unknown,
}

/// Compares the account keys among two sorted lists of evidence keys.
pub fn fit(alert_evidence: &[String], incident_evidence: &[String]) -> AccountFit {
    let mut comparable = false;
    for alert in accounts(alert_evidence) {
        for incident in accounts(incident_evidence) {
            if scope(alert) != scope(incident) {
                continue;
            }
            if agree(alert, incident) {
                return AccountFit::Same;
            }
            comparable = true;
        }
    }
    if comparable {
        AccountFit::Foreign
    } else {
        AccountFit::Unknown
    }
}

/// The account keys (without their prefix) of sorted evidence keys.
fn accounts(sorted_keys: &[String]) -> impl Iterator<Item = &str> {
    keys_with_prefix(sorted_keys, ACCOUNT_PREFIX)
}

/// The tool of a tool-scoped id, or `""` for an organisation's name.
fn scope(account: &str) -> &str {
    account.split_once('#').map_or("", |(tool, _)| tool)
}

/// Tool-scoped ids agree when equal. Names agree when they share a word of three letters or
/// more: a display name (`Voltgrid Energy`) and a domain (`voltgrid`) name one organisation.
fn agree(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    if !scope(a).is_empty() {
        return false;
    }
    words(a).any(|word| words(b).any(|other| other == word))
}

fn words(name: &str) -> impl Iterator<Item = &str> {
    name.split('-').filter(|word| word.len() >= 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(accounts: &[&str]) -> Vec<String> {
        let mut keys: Vec<String> = accounts.iter().map(|account| account_key(account)).collect();
        keys.extend([
            "t:payments".to_owned(),
            "ctx:team=core".to_owned(),
            "host=db-1".to_owned(),
        ]);
        keys.sort();
        keys
    }

    #[test]
    fn a_display_name_and_a_domain_name_one_organisation() {
        assert_eq!(fit(&keys(&["voltgrid-energy"]), &keys(&["voltgrid"])), AccountFit::Same);
        assert_eq!(
            fit(&keys(&["voltgrid"]), &keys(&["cellora", "voltgrid"])),
            AccountFit::Same
        );
    }

    #[test]
    fn different_names_of_one_kind_are_foreign() {
        assert_eq!(
            fit(&keys(&["voltgrid"]), &keys(&["cellora-telecom"])),
            AccountFit::Foreign
        );
        assert_eq!(
            fit(&keys(&["dynatrace#abc123"]), &keys(&["dynatrace#xyz789"])),
            AccountFit::Foreign
        );
    }

    #[test]
    fn ids_of_different_tools_or_none_say_nothing() {
        assert_eq!(
            fit(&keys(&["dynatrace#abc123"]), &keys(&["voltgrid"])),
            AccountFit::Unknown
        );
        assert_eq!(fit(&keys(&[]), &keys(&["voltgrid"])), AccountFit::Unknown);
        assert_eq!(fit(&keys(&["voltgrid"]), &keys(&[])), AccountFit::Unknown);
    }

    #[test]
    fn short_words_do_not_make_names_agree() {
        assert_eq!(fit(&keys(&["ab-north"]), &keys(&["ab-south"])), AccountFit::Foreign);
    }
}
