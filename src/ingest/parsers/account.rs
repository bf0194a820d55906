//! The account of the tool an alert came from, as `NormalizedAlert::account`: the name of the
//! organisation (a slug), or `<tool>#<id>` for an id only the same tool's alerts share
//! (`vigil_aggregates::correlation::account` compares them).
//!
//! Each source says where its account is: a self-hosted tool's link has the organisation's
//! domain (`grafana.acme.example`), a hosted one's link or body names the customer
//! (`acme.pagerduty.com`, a netdata space, a Datadog organisation, a Dynatrace environment).

use url::Url;
use vigil_aggregates::correlation::evidence::slug;

/// Hosted tools whose customers get a subdomain: there, the organisation is the subdomain's
/// first label (`acme.grafana.net`), not the tool's own domain.
const HOSTED_DOMAINS: &[&str] = &[
    "grafana.net",
    "splunkcloud.com",
    "pagerduty.com",
    "opsgenie.com",
    "atlassian.net",
    "netdata.cloud",
];

/// Second-level labels under a country code that are not an organisation's (`acme.co.uk`).
/// A public suffix list would be exact; these cover the common registrations, and a miss
/// only names the account by a generic word, which then agrees with more.
const COUNTRY_SECOND_LEVELS: &[&str] = &["co", "com", "net", "org", "ac", "gov", "edu", "ne", "or"];

/// The organisation a self-hosted tool's link belongs to: the label of its host's registered
/// domain (`grafana.acme.example` → `acme`), or the customer's label of a hosted tool's domain.
pub(super) fn organisation(link: Option<&str>) -> Option<String> {
    let host = host(link?)?;
    let labels: Vec<&str> = host.split('.').filter(|label| !label.is_empty()).collect();
    if let Some(domain) = HOSTED_DOMAINS
        .iter()
        .find(|domain| host.ends_with(&format!(".{domain}")))
    {
        let customer = host.strip_suffix(domain)?.trim_end_matches('.');
        return customer.rsplit('.').next().and_then(name);
    }
    let [.., second, last] = labels.as_slice() else {
        return None;
    };
    let under_country = last.len() == 2 && COUNTRY_SECOND_LEVELS.contains(second);
    match labels.as_slice() {
        [.., third, _, _] if under_country => name(third),
        _ if under_country => None,
        _ => name(second),
    }
}

/// The first label of a hosted tool's link (`acme.pagerduty.com` → `acme`) when the host has a
/// subdomain: where the tool puts the customer.
pub(super) fn subdomain(link: Option<&str>) -> Option<String> {
    let host = host(link?)?;
    let mut labels = host.split('.');
    let first = labels.next()?;
    (labels.count() >= 2).then(|| name(first)).flatten()
}

/// The path segment after `marker` in a link (`/spaces/acme/rooms/...` → `acme`).
pub(super) fn path_segment_after(link: Option<&str>, marker: &str) -> Option<String> {
    let url = Url::parse(link?).ok()?;
    let mut segments = url.path_segments()?;
    segments.find(|segment| *segment == marker)?;
    segments.next().and_then(name)
}

/// An organisation's display name as a slug (`Voltgrid Energy` → `voltgrid-energy`).
pub(super) fn name(display: &str) -> Option<String> {
    let slug = slug(display);
    (!slug.is_empty() && slug.len() <= 64).then_some(slug)
}

/// An id that only the same tool's alerts can share (`dynatrace#abc12345`).
pub(super) fn scoped(tool: &str, id: &str) -> Option<String> {
    name(id).map(|id| format!("{tool}#{id}"))
}

/// The lowercase host name of a link; `None` for an address (it names a machine, not whose).
fn host(link: &str) -> Option<String> {
    let url = Url::parse(link.trim()).ok()?;
    match url.host()? {
        url::Host::Domain(domain) => Some(domain.to_ascii_lowercase()),
        url::Host::Ipv4(_) | url::Host::Ipv6(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_hosted_tool_belongs_to_its_domain() {
        let of = |link: &str| organisation(Some(link));
        assert_eq!(
            of("https://grafana.acme.example/alerting/view?orgId=1").as_deref(),
            Some("acme")
        );
        assert_eq!(
            of("https://splunk.ops.acme-corp.com:8000/app/search").as_deref(),
            Some("acme-corp")
        );
        assert_eq!(of("http://jenkins.acme.co.uk/job/x/1/").as_deref(), Some("acme"));
        assert_eq!(of("https://acme.grafana.net/alerting").as_deref(), Some("acme"));
        assert_eq!(of("https://eu.acme.splunkcloud.com/app").as_deref(), Some("acme"));
    }

    #[test]
    fn addresses_bare_hosts_and_non_links_have_no_organisation() {
        for link in [
            "http://10.1.2.3:9093/#/alerts",
            "http://alertmanager:9093/",
            "not a link",
            "https://co.uk/",
        ] {
            assert_eq!(organisation(Some(link)), None, "{link}");
        }
        assert_eq!(organisation(None), None);
    }

    #[test]
    fn a_hosted_tool_names_its_customer_in_the_subdomain_or_the_path() {
        assert_eq!(
            subdomain(Some("https://acme.pagerduty.com/incidents/Q1")).as_deref(),
            Some("acme")
        );
        assert_eq!(subdomain(Some("https://pagerduty.com/incidents/Q1")), None);
        let space = path_segment_after(
            Some("https://app.netdata.cloud/spaces/acme/rooms/all/alerts/x"),
            "spaces",
        );
        assert_eq!(space.as_deref(), Some("acme"));
        assert_eq!(scoped("dynatrace", "ABC123").as_deref(), Some("dynatrace#abc123"));
        assert_eq!(name("Voltgrid Energy").as_deref(), Some("voltgrid-energy"));
        assert_eq!(name(" - "), None);
    }
}
