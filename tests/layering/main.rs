//! The layering check of `docs/ARCHITECTURE.md`:
//!
//! - (a) the domain crate (`aggregates/`) names no I/O crate, in its manifest or in its code
//!   (its tests may use its dev-dependencies);
//! - (b) a top-level module of `src/` imports only modules of its own layer or of the layers
//!   below ([`LAYERS`]: platform ← application ← adapters ← wiring), so the application never
//!   names `http`, `ws` or `state` (`AppState`);
//! - (c) no cycle among the top-level modules of `src/`.
//!
//! Today's code breaks (b) and (c) in places (issue #29). [`debt::KNOWN_DEBT`] lists each such
//! import edge with why it exists. The check fails on a violation not in the list, and on an
//! entry that is no longer a violation, so the list can only shrink.
//!
//! The code is read with `syn` (already built for the derive macros) rather than line by line:
//! it sees `use crate::{a, b::{c}}` groups, `crate::x::` paths inside expressions and types,
//! `super::` from a `mod.rs` (the crate root), comments and strings for what they are, and which
//! code is under `#[cfg(test)]`. Macro bodies and attribute arguments (`json!`, `utoipa::path`)
//! are token streams to syn; paths in them are read from their tokens. Test code counts: a test
//! that builds an `AppState` inside an application module ties it to the adapters as well.

mod debt;
mod scan;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use scan::{crate_references, source_references, Reference};

/// Each top-level module of `src/` by layer, lowest first. A module may import its own layer's
/// modules and those of the layers before it. A new module must be placed here.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "platform",
        &[
            "cache",
            "config",
            "db",
            "error",
            "event_store",
            "jobs",
            "language_model",
            "metrics",
            "telemetry",
            "text",
            "vector_store",
        ],
    ),
    (
        "application",
        &[
            "agent",
            "analysis",
            "connections",
            "incident_merge",
            "incident_split",
            "ingest",
            "orchestration",
            "topology",
            "users",
        ],
    ),
    (
        "adapters",
        &[
            "auth",
            "db_circuit",
            "extract",
            "health",
            "http",
            "rate_limit",
            "replay",
            "state",
            "ws",
        ],
    ),
    ("wiring", &["app", "eval"]),
];

/// Crates that do I/O, which the domain must not name (`-` written `_`).
const IO_CRATES: &[&str] = &[
    "async_std",
    "axum",
    "axum_extra",
    "hyper",
    "hyper_util",
    "mio",
    "postgres_es",
    "redis",
    "reqwest",
    "sqlx",
    "tokio",
    "tokio_tungstenite",
    "tokio_util",
    "tower",
    "tower_http",
    "tungstenite",
    "vigil_llm",
    "vigil_projections",
    "vigil_providers",
    "vigil_secrets",
];
/// Parts of the standard library that reach outside the process (`std::net`'s address types
/// are plain values, its sockets are not).
const IO_STD_PATHS: &[&str] = &[
    "std::env",
    "std::fs",
    "std::process",
    "std::net::TcpListener",
    "std::net::TcpStream",
    "std::net::ToSocketAddrs",
    "std::net::UdpSocket",
];

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// (importing module, imported module) → where the code makes the import (`file:line`).
type Edges = BTreeMap<(String, String), Vec<String>>;

/// A forbidden import edge and where the code makes it.
struct Violation {
    rule: String,
    locations: Vec<String>,
}

#[test]
fn layers_hold_but_for_the_known_debt() {
    let mut violations = domain_violations();
    let (modules, edges) = module_graph();
    let layer_of = layer_of(&modules);
    let cyclic = edges_in_cycles(&edges.keys().cloned().collect());
    for ((from, to), locations) in &edges {
        let (from_layer, to_layer) = (layer_of[from.as_str()], layer_of[to.as_str()]);
        let mut rules = Vec::new();
        if to_layer > from_layer {
            rules.push(format!("{} imports {}", LAYERS[from_layer].0, LAYERS[to_layer].0));
        }
        if cyclic.contains(&(from.clone(), to.clone())) {
            rules.push("in a cycle".to_owned());
        }
        if !rules.is_empty() {
            violations.insert(
                (from.clone(), to.clone()),
                Violation {
                    rule: rules.join(", "),
                    locations: locations.clone(),
                },
            );
        }
    }

    let known: BTreeSet<(String, String)> = debt::KNOWN_DEBT
        .iter()
        .map(|&(from, to, _)| (from.to_owned(), to.to_owned()))
        .collect();
    assert_eq!(known.len(), debt::KNOWN_DEBT.len(), "KNOWN_DEBT lists an edge twice");
    let mut report = String::new();
    for ((from, to), violation) in &violations {
        if !known.contains(&(from.clone(), to.clone())) {
            report.push_str(&format!(
                "new violation {from} -> {to} ({}), at:\n    {}\n",
                violation.rule,
                violation.locations.join("\n    ")
            ));
        }
    }
    for (from, to) in &known {
        if !violations.contains_key(&(from.clone(), to.clone())) {
            report.push_str(&format!(
                "{from} -> {to} is no longer a violation: delete it from KNOWN_DEBT (tests/layering/debt.rs)\n"
            ));
        }
    }
    assert!(report.is_empty(), "layering check (docs/ARCHITECTURE.md):\n{report}");
}

/// Every top-level module is placed in exactly one layer, and every layer's module exists.
#[test]
fn every_module_has_one_layer() {
    let (modules, _) = module_graph();
    let placed: Vec<&str> = LAYERS.iter().flat_map(|(_, members)| members.iter().copied()).collect();
    let unique: BTreeSet<&str> = placed.iter().copied().collect();
    assert_eq!(placed.len(), unique.len(), "a module is in two layers");
    let modules: BTreeSet<&str> = modules.iter().map(String::as_str).collect();
    assert_eq!(unique, modules, "LAYERS and the modules of src/lib.rs differ");
}

/// The top-level modules of `src/lib.rs`, and the import edges between them with where each
/// is made. `src/main.rs`, the binary, is the wiring's own and is not read.
fn module_graph() -> (BTreeSet<String>, Edges) {
    let references = crate_references(workspace(), &workspace().join("src/lib.rs"));
    let modules: BTreeSet<String> = references.iter().filter_map(|r| r.module.first().cloned()).collect();
    // `crate::Config` is `config::Config`, re-exported at the root.
    let reexports: BTreeMap<String, String> = references
        .iter()
        .filter(|r| r.module.is_empty() && r.segments.len() > 1 && modules.contains(&r.segments[0]))
        .map(|r| (r.segments.last().cloned().unwrap_or_default(), r.segments[0].clone()))
        .collect();
    let mut edges = Edges::new();
    for reference in &references {
        let (Some(from), Some(target)) = (reference.module.first(), reference.top_level_target()) else {
            continue;
        };
        let to = match reexports.get(target) {
            Some(module) => module.clone(),
            None => target.to_owned(),
        };
        if &to != from && modules.contains(&to) {
            let mut location = reference.location();
            if reference.test {
                location.push_str(" (test)");
            }
            let locations = edges.entry((from.clone(), to)).or_default();
            if !locations.contains(&location) {
                locations.push(location);
            }
        }
    }
    (modules, edges)
}

fn layer_of(modules: &BTreeSet<String>) -> BTreeMap<&str, usize> {
    let mut layer_of = BTreeMap::new();
    for (index, (_, members)) in LAYERS.iter().enumerate() {
        for member in *members {
            layer_of.insert(*member, index);
        }
    }
    for module in modules {
        assert!(
            layer_of.contains_key(module.as_str()),
            "src/{module}: place it in a layer of LAYERS (tests/layering/main.rs)"
        );
    }
    layer_of
}

/// The edges that lie on a cycle: those whose two ends are in one strongly connected component.
fn edges_in_cycles(edges: &BTreeSet<(String, String)>) -> BTreeSet<(String, String)> {
    let mut successors: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges {
        successors.entry(from).or_default().push(to);
    }
    fn reaches<'a>(successors: &BTreeMap<&'a str, Vec<&'a str>>, start: &'a str) -> BTreeSet<&'a str> {
        let mut seen = BTreeSet::from([start]);
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            for &next in successors.get(node).into_iter().flatten() {
                if seen.insert(next) {
                    stack.push(next);
                }
            }
        }
        seen
    }
    // A few dozen modules: reachability from each is cheap, and plainer than Tarjan's algorithm.
    edges
        .iter()
        .filter(|(from, to)| reaches(&successors, to).contains(from.as_str()))
        .cloned()
        .collect()
}

/// Rule (a): I/O crates named by the domain crate's manifest or by its non-test code.
fn domain_violations() -> BTreeMap<(String, String), Violation> {
    let mut found: BTreeMap<(String, String), Violation> = BTreeMap::new();
    let mut add = |what: String, location: String| {
        found
            .entry(("aggregates".to_owned(), what))
            .or_insert_with(|| Violation {
                rule: "the domain names an I/O crate".to_owned(),
                locations: Vec::new(),
            })
            .locations
            .push(location);
    };
    let manifest_path = workspace().join("aggregates/Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path).expect("aggregates/Cargo.toml");
    for (name, line) in runtime_dependencies(&manifest) {
        if IO_CRATES.contains(&name.as_str()) {
            add(name, format!("aggregates/Cargo.toml:{line}"));
        }
    }
    for reference in crate_references(workspace(), &workspace().join("aggregates/src/lib.rs")) {
        if reference.test {
            continue;
        }
        let path = reference.segments.join("::");
        if IO_CRATES.contains(&reference.segments[0].as_str()) {
            add(reference.segments[0].clone(), reference.location());
        } else if let Some(io) = IO_STD_PATHS
            .iter()
            .find(|io| path == **io || path.starts_with(&format!("{io}::")))
        {
            add(io.to_string(), reference.location());
        }
    }
    for violation in found.values_mut() {
        violation.locations.dedup();
    }
    found
}

/// The crates a manifest's `[dependencies]`, `[build-dependencies]` and target-specific
/// dependency tables name (as `snake_case`), with their line; not `[dev-dependencies]`.
fn runtime_dependencies(manifest: &str) -> Vec<(String, usize)> {
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for (index, line) in manifest.lines().enumerate() {
        let line = line.trim();
        if let Some(table) = line.strip_prefix('[') {
            let table = table.trim_end_matches(']');
            in_dependencies = table == "dependencies"
                || table == "build-dependencies"
                || (table.starts_with("target.") && table.ends_with(".dependencies"));
            continue;
        }
        if !in_dependencies || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line.split(['=', '.']).next().unwrap_or_default().trim();
        found.push((name.trim_matches('"').replace('-', "_"), index + 1));
    }
    found
}

#[test]
fn the_scanner_reads_groups_super_macros_and_attributes() {
    let source = r#"
        use crate::{alpha, beta::{gamma, delta::Epsilon}};
        use super::super::zeta::Eta;
        use self::local::Thing;
        // crate::in_a_comment::Nothing
        #[utoipa::path(get, path = "/x", responses((status = 200, body = crate::iota::Body)))]
        fn f() -> crate::theta::Type {
            let _ = "crate::in_a_string::Nothing";
            let _ = json!({ "a": crate::kappa::value() });
            super::lambda::call();
            crate::theta::Type
        }
        #[cfg(test)]
        mod tests {
            use super::*;
            fn g() { crate::mu::helper(); }
        }
    "#;
    let references = source_references(source, &["own", "file"]);
    let targets: BTreeSet<(&str, bool)> = references
        .iter()
        .filter_map(|r| Some((r.top_level_target()?, r.test)))
        .collect();
    let expected = BTreeSet::from([
        ("alpha", false),
        ("beta", false),
        ("zeta", false),
        ("own", false),
        ("iota", false),
        ("theta", false),
        ("kappa", false),
        ("mu", true),
        ("own", true),
    ]);
    assert_eq!(targets, expected);
    let theta_lines: BTreeSet<usize> = references
        .iter()
        .filter(|r| r.top_level_target() == Some("theta"))
        .map(|r| r.line)
        .collect();
    assert_eq!(theta_lines, BTreeSet::from([7, 11]));
}

#[test]
fn super_from_a_mod_rs_is_the_crate_root() {
    let references = source_references("use super::other::X; fn f() { super::third::y(); }", &["own"]);
    let targets: BTreeSet<&str> = references.iter().filter_map(Reference::top_level_target).collect();
    assert_eq!(targets, BTreeSet::from(["other", "third"]));
}

#[test]
fn only_edges_on_a_cycle_are_cyclic() {
    let edge = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    let edges = BTreeSet::from([
        edge("a", "b"),
        edge("b", "c"),
        edge("c", "a"),
        edge("c", "d"),
        edge("d", "e"),
    ]);
    assert_eq!(
        edges_in_cycles(&edges),
        BTreeSet::from([edge("a", "b"), edge("b", "c"), edge("c", "a")])
    );
}

#[test]
fn manifests_dependencies_are_read_but_not_dev_dependencies() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\nserde.workspace = true\ntokio-util = \"0.7\"\n\n\
                    [dev-dependencies]\ntokio.workspace = true\n";
    assert_eq!(
        runtime_dependencies(manifest),
        vec![("serde".to_owned(), 5), ("tokio_util".to_owned(), 6)]
    );
}

/// Prints the module graph as the Mermaid diagram of `docs/ARCHITECTURE.md`, known debt
/// dashed: `cargo nextest run --test layering --run-ignored only --no-capture print_module_graph`.
#[test]
#[ignore = "prints the diagram for the docs; checks nothing"]
fn print_module_graph() {
    let (modules, edges) = module_graph();
    let known: BTreeSet<(&str, &str)> = debt::KNOWN_DEBT.iter().map(|&(from, to, _)| (from, to)).collect();
    let mut diagram = String::from("flowchart TD\n");
    for (layer, members) in LAYERS.iter().rev() {
        diagram.push_str(&format!("  subgraph {layer}\n"));
        for module in members.iter().filter(|m| modules.contains(**m)) {
            diagram.push_str(&format!("    {module}\n"));
        }
        diagram.push_str("  end\n");
    }
    for (from, to) in edges.keys() {
        let arrow = if known.contains(&(from.as_str(), to.as_str())) {
            "-.->"
        } else {
            "-->"
        };
        diagram.push_str(&format!("  {from} {arrow} {to}\n"));
    }
    println!("{diagram}");
}
