//! A user's declared service catalog: services, what each depends on, the addresses it owns and
//! the other names it goes by. Built only through [`Catalog::new`], which validates and
//! normalizes, so a value of this type is always a consistent catalog.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
};

use serde::{Deserialize, Serialize};

/// Services one catalog declares at most.
pub const MAX_SERVICES: usize = 500;
/// Dependencies, addresses and aliases one service declares at most.
pub const MAX_DEPENDENCIES: usize = 100;
pub const MAX_ADDRESSES: usize = 100;
pub const MAX_ALIASES: usize = 20;
/// Longest service name or alias (characters).
pub const MAX_NAME_CHARS: usize = 128;
/// Longest address (a DNS name's limit).
pub const MAX_ADDRESS_CHARS: usize = 253;

/// One declared service, as stored: names trimmed, dependencies by their services' names,
/// addresses normalized (lowercase, IPs in their canonical form).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredService {
    pub name: String,
    #[serde(default)]
    pub depends_on: Vec<String>,
    #[serde(default)]
    pub addresses: Vec<String>,
    #[serde(default)]
    pub aliases: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    services: Vec<DeclaredService>,
}

/// Why a catalog was refused: the field (`services[2].dependsOn[0]`) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct CatalogError {
    pub field: String,
    pub problem: String,
}

fn refuse(field: impl Into<String>, problem: impl Into<String>) -> CatalogError {
    CatalogError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// How names are compared: case and surrounding space do not count.
pub fn name_key(name: &str) -> String {
    name.trim().to_lowercase()
}

impl Catalog {
    /// Checks and normalizes `services` (as a caller sent them, in order): at most
    /// [`MAX_SERVICES`]; names and aliases non-blank, at most [`MAX_NAME_CHARS`], without
    /// control characters, unique across the catalog (case-insensitively); dependencies naming
    /// a declared service (by name or alias), not itself, each once; addresses well-formed
    /// ([`Address::parse`]) and owned by one service only.
    pub fn new(services: Vec<DeclaredService>) -> Result<Self, CatalogError> {
        if services.len() > MAX_SERVICES {
            return Err(refuse("services", format!("at most {MAX_SERVICES} services")));
        }
        // Every name and alias → the index of its service.
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut normalized = Vec::with_capacity(services.len());
        for (i, service) in services.iter().enumerate() {
            let at = format!("services[{i}]");
            let name = checked_name(&service.name, &format!("{at}.name"))?;
            if names.insert(name_key(&name), i).is_some() {
                return Err(refuse(format!("{at}.name"), format!("`{name}` is declared twice")));
            }
            if service.aliases.len() > MAX_ALIASES {
                return Err(refuse(
                    format!("{at}.aliases"),
                    format!("at most {MAX_ALIASES} aliases"),
                ));
            }
            let mut aliases = Vec::with_capacity(service.aliases.len());
            for (j, alias) in service.aliases.iter().enumerate() {
                let alias = checked_name(alias, &format!("{at}.aliases[{j}]"))?;
                if names.insert(name_key(&alias), i).is_some() {
                    return Err(refuse(
                        format!("{at}.aliases[{j}]"),
                        format!("`{alias}` is already a service name or alias"),
                    ));
                }
                aliases.push(alias);
            }
            normalized.push(DeclaredService {
                name,
                depends_on: Vec::new(),
                addresses: Vec::new(),
                aliases,
            });
        }
        let mut owners: HashMap<String, usize> = HashMap::new();
        for (i, service) in services.iter().enumerate() {
            let at = format!("services[{i}]");
            if service.depends_on.len() > MAX_DEPENDENCIES {
                return Err(refuse(
                    format!("{at}.dependsOn"),
                    format!("at most {MAX_DEPENDENCIES} dependencies"),
                ));
            }
            for (j, dependency) in service.depends_on.iter().enumerate() {
                let field = format!("{at}.dependsOn[{j}]");
                let Some(&target) = names.get(&name_key(dependency)) else {
                    return Err(refuse(
                        field,
                        format!("`{}` is not a declared service", excerpt(dependency)),
                    ));
                };
                if target == i {
                    return Err(refuse(field, "a service cannot depend on itself"));
                }
                let target_name = normalized[target].name.clone();
                if normalized[i].depends_on.contains(&target_name) {
                    return Err(refuse(field, format!("`{target_name}` is listed twice")));
                }
                normalized[i].depends_on.push(target_name);
            }
            if service.addresses.len() > MAX_ADDRESSES {
                return Err(refuse(
                    format!("{at}.addresses"),
                    format!("at most {MAX_ADDRESSES} addresses"),
                ));
            }
            for (j, raw) in service.addresses.iter().enumerate() {
                let field = format!("{at}.addresses[{j}]");
                let address = Address::parse(raw).map_err(|problem| refuse(field.clone(), problem))?;
                let text = address.to_string();
                if let Some(&owner) = owners.get(&text) {
                    let problem = if owner == i {
                        format!("`{text}` is listed twice")
                    } else {
                        format!("`{text}` is already owned by `{}`", normalized[owner].name)
                    };
                    return Err(refuse(field, problem));
                }
                owners.insert(text.clone(), i);
                normalized[i].addresses.push(text);
            }
        }
        Ok(Self { services: normalized })
    }

    pub fn services(&self) -> &[DeclaredService] {
        &self.services
    }

    /// Every declared dependency, `(service, dependency)`, in declaration order.
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str)> {
        self.services
            .iter()
            .flat_map(|s| s.depends_on.iter().map(move |d| (s.name.as_str(), d.as_str())))
    }
}

fn checked_name(raw: &str, field: &str) -> Result<String, CatalogError> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(refuse(field, "must not be blank"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(refuse(field, format!("at most {MAX_NAME_CHARS} characters")));
    }
    if name.chars().any(char::is_control) {
        return Err(refuse(field, "must not contain control characters"));
    }
    Ok(name.to_owned())
}

/// A caller's value as an error quotes it: at most 40 characters.
fn excerpt(value: &str) -> String {
    let mut cut: String = value.chars().take(40).collect();
    if value.chars().count() > 40 {
        cut.push('…');
    }
    cut
}

/// What a service owns: an IP, an endpoint (`IP:port`, `[v6]:port`, `host:port`), a DNS name or
/// a single-label host name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Ip(IpAddr),
    Endpoint { host: String, port: u16 },
    Dns(String),
    Host(String),
}

impl Address {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let text = raw.trim().to_lowercase();
        if text.is_empty() {
            return Err("must not be blank".into());
        }
        if text.chars().count() > MAX_ADDRESS_CHARS {
            return Err(format!("at most {MAX_ADDRESS_CHARS} characters"));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Self::Ip(ip));
        }
        if let Ok(socket) = text.parse::<SocketAddr>() {
            return match socket.port() {
                0 => Err(format!("`{}`: port 0 is not a port", excerpt(raw))),
                port => Ok(Self::Endpoint {
                    host: socket.ip().to_string(),
                    port,
                }),
            };
        }
        if let Some((host, port)) = text.rsplit_once(':') {
            let port = port.parse::<u16>().ok().filter(|p| *p > 0);
            return match port {
                Some(port) if is_dns_name(host) || is_host_label(host) => Ok(Self::Endpoint {
                    host: host.to_owned(),
                    port,
                }),
                _ => Err(format!(
                    "`{}` is not an IP, IP:port, host:port, host name or DNS name",
                    excerpt(raw)
                )),
            };
        }
        if is_dns_name(&text) {
            Ok(Self::Dns(text))
        } else if is_host_label(&text) {
            Ok(Self::Host(text))
        } else {
            Err(format!(
                "`{}` is not an IP, IP:port, host:port, host name or DNS name",
                excerpt(raw)
            ))
        }
    }

    /// The evidence keys (`kind=value`, as `correlation::evidence` writes them) under which an
    /// alert naming this address shows it.
    pub fn evidence_keys(&self) -> Vec<String> {
        match self {
            Self::Ip(ip) => vec![format!("ip={ip}")],
            Self::Endpoint { host, port } if host.contains(':') => vec![format!("endpoint=[{host}]:{port}")],
            Self::Endpoint { host, port } => vec![format!("endpoint={host}:{port}")],
            Self::Dns(name) => vec![format!("dns={name}"), format!("host={name}")],
            Self::Host(name) => vec![format!("host={name}")],
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ip(ip) => write!(f, "{ip}"),
            Self::Endpoint { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Self::Endpoint { host, port } => write!(f, "{host}:{port}"),
            Self::Dns(name) | Self::Host(name) => f.write_str(name),
        }
    }
}

/// One label of a host name: letters, digits and hyphens, not at either end, at most 63.
fn is_host_label(text: &str) -> bool {
    (1..=63).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
        && text.bytes().any(|b| b.is_ascii_alphabetic())
}

/// Two labels or more, the last with a letter (so that `10.1.2` is not a name).
fn is_dns_name(text: &str) -> bool {
    let labels: Vec<&str> = text.trim_end_matches('.').split('.').collect();
    text.len() <= MAX_ADDRESS_CHARS
        && labels.len() >= 2
        && labels.iter().all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
        && labels
            .last()
            .is_some_and(|l| l.bytes().any(|b| b.is_ascii_alphabetic()))
}
