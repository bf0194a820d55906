//! The monitoring shipped in deploy/: the alerting and recording rules pass `promtool` (and the
//! alerts' own unit tests), the exposition passes promtool's lint, and every metric a rule or a
//! dashboard panel reads is one the service exposes.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use serde_json::Value;

use crate::{
    helpers::spawn_app,
    ingestion::{fixture, post_alert},
    metrics::scrape,
};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

const ALERTS: &str = "deploy/prometheus/vigil-alerts.yml";
const RECORDING: &str = "deploy/prometheus/vigil-recording.yml";
const ALERT_TESTS: &str = "deploy/prometheus/vigil-alerts.test.yml";
const DASHBOARD: &str = "deploy/grafana/vigil-dashboard.json";

/// A promtool, installed by the project's script when the machine has none. Never skipped: a
/// test that cannot check the rules fails, saying why.
fn promtool() -> PathBuf {
    let script = repo("scripts/ensure-promtool.sh");
    let output = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|error| panic!("could not run {}: {error}", script.display()));
    assert!(
        output.status.success(),
        "{} failed ({}): promtool is needed to check deploy/prometheus; install Debian's `prometheus` package",
        script.display(),
        output.status
    );
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// Runs promtool with `args` (and `input` on its standard input); panics with its output when it fails.
fn run_promtool(args: &[&str], input: Option<&str>) -> String {
    let mut child = Command::new(promtool())
        .args(args)
        .current_dir(repo("."))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.unwrap_or_default().as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?} failed:\n{said}");
    said
}

#[test]
fn the_rules_pass_promtool_and_the_alerts_fire_as_their_tests_say() {
    let said = run_promtool(&["check", "rules", ALERTS, RECORDING], None);
    assert!(said.contains("SUCCESS"), "{said}");
    let said = run_promtool(&["test", "rules", ALERT_TESTS], None);
    assert!(said.contains("SUCCESS"), "{said}");
}

#[tokio::test]
async fn the_exposition_passes_promtool_lint() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let metrics = scrape(&app).await;
    let said = run_promtool(&["check", "metrics"], Some(&metrics.text));
    assert!(said.trim().is_empty(), "promtool's lint has findings:\n{said}");
}

#[tokio::test]
async fn every_metric_the_rules_and_the_dashboard_read_is_exposed() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let metrics = scrape(&app).await;
    // A histogram is read through its `_bucket`, `_sum` and `_count` series, all exposed.
    let exposed: BTreeSet<&str> = metrics
        .samples
        .iter()
        .map(|sample| sample.name.as_str())
        .chain(metrics.types.keys().map(String::as_str))
        .collect();

    let alerts = std::fs::read_to_string(repo(ALERTS)).unwrap();
    let recording = std::fs::read_to_string(repo(RECORDING)).unwrap();
    let recorded: BTreeSet<String> = rule_fields(&recording, "record").into_iter().collect();
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD)).unwrap()).unwrap();
    let mut panel_exprs = Vec::new();
    exprs_in(&dashboard, &mut panel_exprs);

    let mut expressions = rule_fields(&alerts, "expr");
    expressions.extend(rule_fields(&recording, "expr"));
    assert!(expressions.len() >= 20, "{expressions:#?}");
    assert!(panel_exprs.len() >= 30, "{panel_exprs:#?}");
    expressions.extend(panel_exprs);
    let read: BTreeSet<String> = expressions.iter().flat_map(|expr| metric_names(expr)).collect();
    assert!(read.len() >= 25, "{read:#?}");
    let missing: Vec<&String> = read
        .iter()
        // `up` is the series Prometheus itself makes for every scrape target.
        .filter(|name| !exposed.contains(name.as_str()) && !recorded.contains(*name) && *name != "up")
        .collect();
    assert!(
        missing.is_empty(),
        "read but not exposed: {missing:?}\n{}",
        metrics.text
    );
}

#[test]
fn the_dashboard_lays_out_unique_panels_that_query_its_datasource_variable() {
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD)).unwrap()).unwrap();
    assert_eq!(dashboard["uid"], "vigil-service");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(variables
        .iter()
        .any(|v| v["name"] == "datasource" && v["type"] == "datasource"));
    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let mut places = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "{title}: id taken");
        let place = &panel["gridPos"];
        let (x, y, w, h) = ["x", "y", "w", "h"].map(|key| place[key].as_u64().unwrap()).into();
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: {place}");
        // No two panels start at the same cell (overlap as Grafana would lay them out).
        assert!(places.insert((x, y)), "{title}: {place}");
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            assert!(!target["expr"].as_str().unwrap().is_empty(), "{title}");
        }
    }
    assert!(panels.len() >= 30, "{}", panels.len());
}

#[test]
fn metric_names_are_told_apart_from_functions_labels_and_keywords() {
    let names = metric_names(
        r#"histogram_quantile(0.9, sum by (le, route) (rate(a_seconds_bucket{route=~"/api/x", status!="5.."}[5m])))
           / on (instance) group_left (kind) max without (pod) (b_total offset 5m) > bool 0.5
           and c:recorded:rate5m unless d_up * -1e3 or sum(rate(e_total[$__rate_interval]))"#,
    );
    assert_eq!(
        names,
        ["a_seconds_bucket", "b_total", "c:recorded:rate5m", "d_up", "e_total"]
    );
}

/// The values of `field:` in a rules file, a plain scalar or a folded or literal block (`>-`,
/// `|`). promtool checks the file is valid YAML and PromQL; this only reads what it says.
fn rule_fields(yaml: &str, field: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut lines = yaml.lines().peekable();
    let key = format!("{field}:");
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start().trim_start_matches("- ");
        let Some(value) = trimmed.strip_prefix(&key) else {
            continue;
        };
        let value = value.trim();
        if value.starts_with('|') || value.starts_with('>') {
            let indent = line.len() - line.trim_start().len();
            let mut block = Vec::new();
            while let Some(next) = lines.peek() {
                let next_indent = next.len() - next.trim_start().len();
                if !next.trim().is_empty() && next_indent <= indent {
                    break;
                }
                block.push(next.trim().to_owned());
                lines.next();
            }
            found.push(block.join(" "));
        } else {
            found.push(value.to_owned());
        }
    }
    found
}

/// Every `expr` of a dashboard's panels and targets.
fn exprs_in(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => found.push(expr.clone()),
                    _ => exprs_in(value, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| exprs_in(item, found)),
        _ => {}
    }
}

/// The metric names a PromQL expression reads: its identifiers, less functions and aggregations
/// (followed by `(`), keywords, label names (in `{...}`, `by (...)` and the like), strings,
/// ranges and numbers.
fn metric_names(expr: &str) -> Vec<String> {
    const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];
    const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            c if c.is_ascii_digit() || c == '.' || c == '$' => {
                // A number, a duration or a dashboard variable: never a name.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '.' | '_' | '$')) {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                // A call, or an aggregation with its grouping first (`sum by (le) (...)`).
                let rest: String = chars[next..].iter().take(8).collect();
                let called = chars.get(next) == Some(&'(')
                    || ["by", "without"].iter().any(|grouping| {
                        rest.strip_prefix(grouping)
                            .is_some_and(|after| after.starts_with([' ', '(']))
                    });
                if LABEL_LISTS.contains(&word.as_str()) {
                    if called {
                        // Skip the label list.
                        while next < chars.len() && chars[next] != ')' {
                            next += 1;
                        }
                        i = next + 1;
                    }
                } else if !called && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                    names.push(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}
