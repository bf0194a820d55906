//! The gate between a language model's verdict and the recorded conclusion (`docs/rca.md`, the
//! model's verdict gate). The model is given the ledger with its evidence numbered
//! ([`LedgerContext`]) and answers with a verdict, a component and the evidence it rests on
//! ([`answer`]). Its conclusion is downgraded to INCONCLUSIVE when it cites nothing, when it
//! cites only empty tool outputs, or when it contradicts the ledger without new evidence; when
//! accepted, its verdict is never stronger than what it cites allows. Pure rules.

pub mod answer;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{
    correlation::relation::name_parts,
    ledger::{Conclusion, Finding, Hypothesis, Ledger, RuledOut, Verdict},
};
pub use answer::{ModelAnswer, Reference};

/// Hypotheses, and evidence items of each, the model is given: the ledger is ordered strongest
/// first, and a prompt must stay small.
const MAX_HYPOTHESES: usize = 6;
const MAX_ITEMS_PER_HYPOTHESIS: usize = 6;
/// Characters of a tool's output quoted as evidence in the conclusion.
const TOOL_EXCERPT_CHARS: usize = 300;

/// The ledger as the model sees it: its first hypotheses with their evidence numbered `E1`,
/// `E2`, ... in order.
pub struct LedgerContext<'a> {
    ledger: &'a Ledger,
    /// For `E<n>`: (hypothesis index, finding index) at `n - 1`.
    items: Vec<(usize, usize)>,
}

impl<'a> LedgerContext<'a> {
    pub fn new(ledger: &'a Ledger) -> Self {
        let items = ledger
            .hypotheses
            .iter()
            .take(MAX_HYPOTHESES)
            .enumerate()
            .flat_map(|(h, hypothesis)| {
                (0..hypothesis.support.len().min(MAX_ITEMS_PER_HYPOTHESIS)).map(move |f| (h, f))
            })
            .collect();
        Self { ledger, items }
    }

    /// The structured context of the prompt: the built-in verdict, the hypotheses with their
    /// numbered evidence, and what was ruled out.
    pub fn to_json(&self) -> Value {
        let hypotheses: Vec<Value> = self
            .ledger
            .hypotheses
            .iter()
            .take(MAX_HYPOTHESES)
            .enumerate()
            .map(|(h, hypothesis)| {
                let evidence: Vec<Value> = self
                    .items
                    .iter()
                    .enumerate()
                    .filter(|(_, (owner, _))| *owner == h)
                    .map(|(n, (_, f))| {
                        let finding = &hypothesis.support[*f];
                        json!({ "id": format!("E{}", n + 1), "source": finding.source, "field": finding.field,
                                "excerpt": finding.excerpt, "signature": finding.signature })
                    })
                    .collect();
                json!({ "component": hypothesis.component, "kind": hypothesis.kind, "failure": hypothesis.failure,
                        "verdict": hypothesis.verdict, "score": (hypothesis.score * 100.0).round() / 100.0,
                        "namedBy": hypothesis.named_by, "evidence": evidence })
            })
            .collect();
        json!({
            "verdict": self.ledger.verdict(),
            "component": self.ledger.leading().map(|h| &h.component),
            "hypotheses": hypotheses,
            "ruledOut": self.ledger.ruled_out.iter().take(8).collect::<Vec<_>>(),
        })
    }

    fn item(&self, n: usize) -> Option<(&'a Hypothesis, &'a Finding)> {
        let (h, f) = *self.items.get(n.checked_sub(1)?)?;
        let hypothesis = &self.ledger.hypotheses[h];
        Some((hypothesis, &hypothesis.support[f]))
    }
}

/// A tool result the model may cite, as `[key]`.
#[derive(Debug, Clone, Copy)]
pub struct ToolOutput<'a> {
    pub key: usize,
    pub tool: &'a str,
    pub output: &'a str,
    /// What of it is new to the ledger ([`news_in`]): only this can be new evidence.
    pub news: &'a str,
}

/// Why the gate decided as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateRule {
    /// The verdict stands (perhaps weakened to what its evidence allows).
    Accepted,
    /// No verdict block, or one that does not parse: nothing is claimed or cited.
    NoVerdict,
    /// It cites no ledger item or tool result that exists.
    CitesNothing,
    /// It cites only tool results that were empty, no rows, or errors.
    EmptyToolOutputs,
    /// CONFIRMED or LIKELY without naming a component.
    NoComponent,
    /// It names another component than the ledger's CONFIRMED/LIKELY one, or claims a cause where
    /// the ledger found no support, and no cited tool output names its component.
    ContradictsLedger,
    /// Its citations say nothing about the component it names.
    Unsupported,
}

/// The gate's record of the model's verdict, kept with the conclusion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCheck {
    /// What the model claimed; null when its answer had no readable verdict.
    pub claimed_verdict: Option<Verdict>,
    pub claimed_component: Option<String>,
    /// The references it cited that exist (`E1` ledger items, `2` tool results).
    pub cited: Vec<String>,
    pub accepted: bool,
    pub rule: GateRule,
    /// The decision in words.
    pub reason: String,
    /// What the built-in analyst concluded, kept when the model's verdict replaces it.
    pub ledger_verdict: Verdict,
    pub ledger_component: Option<String>,
}

/// The conclusion to record when a model answered: the model's, checked against the ledger and
/// what it cites, with the check in `model`.
pub fn gate(context: &LedgerContext<'_>, answer: Option<&ModelAnswer>, tools: &[ToolOutput<'_>]) -> Conclusion {
    let ledger = context.ledger;
    let builtin = ledger.conclusion();
    let mut check = ModelCheck {
        claimed_verdict: answer.and_then(|a| a.verdict),
        claimed_component: answer.and_then(|a| a.component.clone()),
        cited: Vec::new(),
        accepted: false,
        rule: GateRule::NoVerdict,
        reason: String::new(),
        ledger_verdict: builtin.verdict,
        ledger_component: builtin.component.clone(),
    };
    let downgraded = |mut check: ModelCheck, rule: GateRule, reason: String| Conclusion {
        verdict: Verdict::Inconclusive,
        component: None,
        kind: None,
        failure: None,
        evidence: Vec::new(),
        named_by: Vec::new(),
        ruled_out: builtin.ruled_out.clone(),
        unlinked: builtin.unlinked.clone(),
        model: Some({
            check.rule = rule;
            check.reason = reason;
            check
        }),
    };
    let Some((answer, claimed)) = answer.and_then(|a| Some((a, a.verdict?))) else {
        return downgraded(
            check,
            GateRule::NoVerdict,
            "its answer has no readable verdict block, so it cites nothing".into(),
        );
    };
    let ledger_items: Vec<(&Hypothesis, &Finding)> = answer
        .evidence
        .iter()
        .filter_map(|r| match r {
            Reference::Ledger(n) => context.item(*n),
            Reference::Tool(_) => None,
        })
        .collect();
    let cited_tools: Vec<&ToolOutput<'_>> = answer
        .evidence
        .iter()
        .filter_map(|r| match r {
            Reference::Tool(n) => tools.iter().find(|t| t.key == *n),
            Reference::Ledger(_) => None,
        })
        .collect();
    check.cited = answer
        .evidence
        .iter()
        .filter(|r| match r {
            Reference::Ledger(n) => context.item(*n).is_some(),
            Reference::Tool(n) => tools.iter().any(|t| t.key == *n),
        })
        .map(Reference::to_string)
        .collect();
    if check.cited.is_empty() {
        let reason = if answer.evidence.is_empty() {
            "it cites no evidence".to_owned()
        } else {
            format!("it cites only {}, which do not exist", list(answer.evidence.iter()))
        };
        return downgraded(check, GateRule::CitesNothing, reason);
    }
    let useful_tools: Vec<&ToolOutput<'_>> = cited_tools
        .iter()
        .copied()
        .filter(|t| !is_empty_output(t.output))
        .collect();
    if ledger_items.is_empty() && useful_tools.is_empty() {
        let reason = format!(
            "it cites only empty tool outputs ({})",
            list(cited_tools.iter().map(|t| format!("[{}] {}", t.key, t.tool)))
        );
        return downgraded(check, GateRule::EmptyToolOutputs, reason);
    }
    if claimed == Verdict::Inconclusive {
        check.accepted = true;
        check.rule = GateRule::Accepted;
        check.reason = "it claims no established cause, citing evidence".into();
        return Conclusion {
            model: Some(check),
            ..downgraded_ledger(builtin)
        };
    }
    let Some(component) = answer.component.as_deref() else {
        let reason = format!("it claims {} without naming a component", claimed.as_str());
        return downgraded(check, GateRule::NoComponent, reason);
    };
    // New evidence: a cited tool result that was not empty and names the component in what it
    // adds to the ledger.
    let new_evidence: Vec<&ToolOutput<'_>> = useful_tools
        .iter()
        .copied()
        .filter(|t| names(t.news, component))
        .collect();
    let hypothesis = ledger
        .hypotheses
        .iter()
        .find(|h| same_component(&h.component, component));
    let leader = ledger.leading();
    let contradicts = match leader {
        Some(leader) => !same_component(&leader.component, component),
        None => hypothesis.is_none_or(|h| h.verdict == Verdict::Inconclusive),
    };
    if contradicts && new_evidence.is_empty() {
        let reason = match leader {
            Some(leader) => format!(
                "it names {component} where the ledger found {} {}, and no tool output it cites names {component}",
                leader.verdict.as_str(),
                leader.component
            ),
            None => format!(
                "it claims {} for {component} where the ledger found no support, and no tool output it cites names it",
                claimed.as_str()
            ),
        };
        return downgraded(check, GateRule::ContradictsLedger, reason);
    }
    // What the cited evidence allows: the ledger's verdict for the component when the model cites
    // that hypothesis's evidence, one line more for a tool output naming it (CONFIRMED needs two).
    let ledger_line = hypothesis
        .filter(|h| ledger_items.iter().any(|(owner, _)| std::ptr::eq(*owner, *h)))
        .map(|h| h.verdict)
        .filter(|v| *v != Verdict::Inconclusive);
    let allowed = match (ledger_line, !new_evidence.is_empty()) {
        (None, false) => {
            let reason = format!("none of the evidence it cites concerns {component}");
            return downgraded(check, GateRule::Unsupported, reason);
        }
        (Some(Verdict::Confirmed), _) | (Some(Verdict::Likely), true) => Verdict::Confirmed,
        _ => Verdict::Likely,
    };
    // Verdicts order strongest first: the weaker of the two is the greater.
    let verdict = claimed.max(allowed);
    check.accepted = true;
    check.rule = GateRule::Accepted;
    check.reason = match (verdict == claimed, new_evidence.first()) {
        (true, Some(tool)) => format!(
            "its evidence supports it, including the tool output [{}] naming {component}",
            tool.key
        ),
        (true, None) => format!("it agrees with the ledger and cites its evidence for {component}"),
        (false, _) => format!(
            "weakened from {} to {}: that is what the evidence it cites allows",
            claimed.as_str(),
            verdict.as_str()
        ),
    };
    let mut evidence: Vec<Finding> = ledger_items
        .iter()
        .filter(|(owner, _)| hypothesis.is_some_and(|h| std::ptr::eq(*owner, h)))
        .map(|(_, finding)| (*finding).clone())
        .collect();
    evidence.extend(new_evidence.iter().map(|tool| Finding {
        alert: None,
        source: format!("tool {}", tool.tool),
        field: format!("output [{}]", tool.key),
        excerpt: shortened(tool.output, TOOL_EXCERPT_CHARS),
        signature: None,
    }));
    let mut ruled_out: Vec<RuledOut> = builtin
        .ruled_out
        .iter()
        .filter(|r| !same_component(&r.subject, component))
        .cloned()
        .collect();
    if let Some(leader) = leader.filter(|l| !same_component(&l.component, component)) {
        ruled_out.insert(
            0,
            RuledOut {
                subject: leader.component.clone(),
                reason: format!(
                    "the model's tool output [{}] names {component} instead",
                    new_evidence[0].key
                ),
            },
        );
    }
    Conclusion {
        verdict,
        component: Some(hypothesis.map_or_else(|| component.to_owned(), |h| h.component.clone())),
        kind: hypothesis.map(|h| h.kind),
        failure: hypothesis.map(|h| h.failure.clone()),
        evidence,
        named_by: hypothesis.map(|h| h.named_by.clone()).unwrap_or_default(),
        ruled_out,
        // Leads are for a cause not established; an accepted cause needs none.
        unlinked: if verdict == Verdict::Inconclusive {
            builtin.unlinked.clone()
        } else {
            Vec::new()
        },
        model: Some(check),
    }
}

/// The ledger's conclusion with no cause established (the model's INCONCLUSIVE accepted).
fn downgraded_ledger(builtin: Conclusion) -> Conclusion {
    Conclusion {
        verdict: Verdict::Inconclusive,
        component: None,
        kind: None,
        failure: None,
        evidence: Vec::new(),
        named_by: Vec::new(),
        ..builtin
    }
}

/// Whether a tool's output holds nothing to reason from: empty, no rows, null, or an error
/// (the analysis writes a failed call's output as `error: ...`; a command that exits non-zero or
/// prints nothing on stdout counts as one).
pub fn is_empty_output(output: &str) -> bool {
    let output = output.trim();
    if output.is_empty() || output.to_lowercase().starts_with("error:") {
        return true;
    }
    match serde_json::from_str::<Value>(output) {
        Ok(Value::Null) => true,
        Ok(Value::Array(rows)) => rows.is_empty(),
        Ok(Value::String(text)) => text.trim().is_empty(),
        Ok(Value::Object(fields)) if fields.contains_key("stdout") => {
            let stdout = fields.get("stdout").and_then(Value::as_str).unwrap_or_default();
            let failed = fields
                .get("exit_code")
                .and_then(Value::as_i64)
                .is_some_and(|code| code != 0);
            failed || stdout.trim().is_empty()
        }
        Ok(Value::Object(fields)) => fields.is_empty(),
        _ => false,
    }
}

/// The part of a tool's output that is new to the ledger, which read the analysed incident's
/// alerts already: nothing from a call about the incident itself (its id in the arguments:
/// `get_incident`, `correlated_alerts`), and a listing without the incident's own row.
pub fn news_in(output: &str, arguments: &str, incident_id: &str) -> String {
    if arguments.contains(incident_id) {
        return String::new();
    }
    match serde_json::from_str::<Value>(output) {
        Ok(Value::Array(rows)) => {
            let others: Vec<Value> = rows
                .into_iter()
                .filter(|row| !row.to_string().contains(incident_id))
                .collect();
            Value::Array(others).to_string()
        }
        Ok(value) if value.to_string().contains(incident_id) => String::new(),
        // Text, or JSON cut short (citations keep 4,000 characters): all or nothing.
        Err(_) if output.contains(incident_id) => String::new(),
        _ => output.to_owned(),
    }
}

/// Whether `text` names `component`: its name parts, in order, as consecutive words of the text
/// (`Inventory Service`, `inventory_service` and `inventory-service` all name `inventory-service`).
fn names(text: &str, component: &str) -> bool {
    let wanted = name_parts(component);
    if wanted.is_empty() {
        return false;
    }
    let words = name_parts(text);
    words.windows(wanted.len()).any(|window| window == wanted.as_slice())
}

fn same_component(a: &str, b: &str) -> bool {
    let a = name_parts(a);
    !a.is_empty() && a == name_parts(b)
}

fn list(items: impl Iterator<Item = impl std::fmt::Display>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

fn shortened(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
