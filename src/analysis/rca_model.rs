//! The configured model's part of an analysis. It is given the built-in analyst's findings and
//! the ledger as JSON (its evidence numbered `E1`, `E2`, ...), may check facts with read-only
//! tools (results numbered `[1]`, `[2]`, ...), and answers with a summary that ends in a verdict
//! block (`vigil_aggregates::verdict_gate::answer`). The verdict gate decides what is recorded;
//! the summary and a conclusion thought say what it decided and why.

use chrono::Utc;
use serde_json::Value;
use uuid::Uuid;
use vigil_aggregates::{
    incident::MAX_SUMMARY_CHARS,
    incident_analysis::Citation,
    ledger::{Conclusion, Verdict},
    verdict_gate::{self, answer, LedgerContext, ModelCheck, ToolOutput},
};
use vigil_llm::{ChatMessage, ChatRequest};

use super::analyst::{self, Analysis, Thought, ThoughtKind};
use crate::{
    agent::{cli::CommandKind, credentials::Access, tools::Tool},
    language_model::{Call, Model},
    state::AppState,
};

/// Model rounds one analysis may take to check the findings with tools before it writes.
const MAX_RCA_STEPS: usize = 4;
/// Most characters of a tool's output kept in a citation.
const MAX_CITATION_CHARS: usize = 4_000;

const INSTRUCTIONS: &str = "You are vigil, a site-reliability agent. From the findings and the hypothesis ledger below, \
    write the incident's root cause summary for the on-call engineer: the most likely cause first, the evidence for it, \
    then the next steps. Be specific to the data; do not invent facts. You may first check facts with the read-only \
    tools; each result comes back numbered, and you cite it as [n]. Cite the ledger's evidence by its id, as [E1]. \
    At most 300 words, markdown.\n\n\
    End your answer with your verdict as a fenced JSON block:\n\
    ```json\n{\"verdict\": \"CONFIRMED\" | \"LIKELY\" | \"INCONCLUSIVE\", \"component\": \"<the component at fault, \
    as the ledger spells it>\" or null, \"evidence\": [\"E1\", \"2\"]}\n```\n\
    `evidence` lists the ledger items and tool results your verdict rests on. A verdict that cites nothing, or only \
    empty tool results, or that names another cause than the ledger's without a tool result naming it, is recorded \
    as INCONCLUSIVE.";

/// What the model's part of an analysis adds: the tools it ran, and the conclusion the gate let
/// through. The analysis's summary and thoughts are updated in place.
pub(super) struct Review {
    pub citations: Vec<Citation>,
    pub conclusion: Conclusion,
}

/// Who the analysis is for.
pub(super) struct Subject<'a> {
    pub user_id: &'a str,
    pub incident_id: Uuid,
    pub session_id: Uuid,
    pub title: &'a str,
}

/// Asks the model and gates its verdict. `None` (the built-in analysis stands as it is) when the
/// model fails, runs out of time, or answers nothing.
pub(super) async fn review(
    state: &AppState,
    model: &Model,
    subject: &Subject<'_>,
    analysis: &mut Analysis,
) -> Option<Review> {
    let context = LedgerContext::new(&analysis.ledger);
    let (text, citations) = ask(state, model, subject, analysis, &context.to_json()).await?;
    let (prose, answer) = answer::parse(&text);
    let incident_id = subject.incident_id.to_string();
    let news: Vec<String> = citations
        .iter()
        .map(|c| verdict_gate::news_in(&c.output, c.command.as_deref().unwrap_or_default(), &incident_id))
        .collect();
    let tools: Vec<ToolOutput<'_>> = citations
        .iter()
        .zip(&news)
        .filter_map(|(c, news)| {
            Some(ToolOutput {
                key: c.key.parse().ok()?,
                tool: c.tool_name.as_deref().unwrap_or("tool"),
                output: &c.output,
                news,
            })
        })
        .collect();
    let conclusion = verdict_gate::gate(&context, answer.as_ref(), &tools);
    let check = conclusion.model.as_ref()?;
    let summary = if check.accepted {
        let prose = if prose.is_empty() {
            analysis.summary.clone()
        } else {
            prose
        };
        match check.claimed_verdict.filter(|claimed| *claimed != conclusion.verdict) {
            Some(claimed) => format!(
                "{prose}\n\n_Verdict: {}, not {} as written: {}._",
                conclusion.verdict.as_str(),
                claimed.as_str(),
                check.reason
            ),
            None => prose,
        }
    } else {
        let builtin = analysis.summary.replace(&format!("\n\n_{}_", analyst::DISCLAIMER), "");
        format!(
            "Verdict: {}. The model's conclusion{} was not accepted: {}. The built-in analyst's reading follows.\n\n{builtin}",
            Verdict::Inconclusive.as_str(),
            claim(check),
            check.reason
        )
    };
    analysis.thoughts.push(Thought {
        kind: ThoughtKind::Conclusion,
        content: gate_thought(check, &conclusion),
    });
    analysis.summary = summary.chars().take(MAX_SUMMARY_CHARS).collect();
    Some(Review { citations, conclusion })
}

/// ` (LIKELY: inventory-service)`, or nothing when the model claimed nothing readable.
fn claim(check: &ModelCheck) -> String {
    match (check.claimed_verdict, check.claimed_component.as_deref()) {
        (Some(verdict), Some(component)) => format!(" ({}: {component})", verdict.as_str()),
        (Some(verdict), None) => format!(" ({})", verdict.as_str()),
        _ => String::new(),
    }
}

fn gate_thought(check: &ModelCheck, conclusion: &Conclusion) -> String {
    let cited = if check.cited.is_empty() {
        "citing nothing".to_owned()
    } else {
        format!("citing {}", check.cited.join(", "))
    };
    if check.accepted {
        format!(
            "Verdict gate: the model's conclusion{}, {cited}, is accepted as {}: {}.",
            claim(check),
            conclusion.verdict.as_str(),
            check.reason
        )
    } else {
        format!(
            "Verdict gate: the model's conclusion{}, {cited}, is downgraded to {}: {}.",
            claim(check),
            Verdict::Inconclusive.as_str(),
            check.reason
        )
    }
}

/// A tool call of the analysis, run only if it changes nothing: a `cloud_cli` command that
/// modifies resources is refused, as is input that is not a JSON object.
async fn read_only_run(state: &AppState, subject: &Subject<'_>, name: &str, arguments: &str) -> Result<Value, String> {
    let tool = Tool::named(name).ok_or_else(|| format!("no tool named {name}"))?;
    let input: Value = match serde_json::from_str(arguments) {
        Ok(input @ Value::Object(_)) => input,
        _ => return Err("the tool's input must be a JSON object".into()),
    };
    // No confirmation waits between a check and the run here, so the run's own checks (a
    // configured CLI, a connected account) are the only ones needed.
    if tool.classify(&input).map_err(|error| error.to_string())? == CommandKind::Mutating {
        return Err(format!(
            "an automatic analysis only reads: {name} commands that change resources are not run"
        ));
    }
    tool.run(state, subject.user_id, subject.session_id, Access::ReadOnly, &input)
        .await
        .map_err(|error| error.to_string())
}

/// The model's answer to the findings and the ledger, and the citations of the read-only tools it
/// ran to check them (numbered `1, 2, ...` in the order they ran, cited as `[n]`). `None` when
/// the model fails or answers nothing.
async fn ask(
    state: &AppState,
    model: &Model,
    subject: &Subject<'_>,
    analysis: &Analysis,
    ledger: &Value,
) -> Option<(String, Vec<Citation>)> {
    let mut findings = format!("Incident {}: {}\n\nFindings:\n", subject.incident_id, subject.title);
    for thought in &analysis.thoughts {
        findings += &format!("- [{:?}] {}\n", thought.kind, thought.content);
    }
    findings += "\nProposed steps:\n";
    for suggestion in &analysis.suggestions {
        findings += &format!(
            "- [{}, {:?} risk] {}: {}{}\n",
            suggestion.kind,
            suggestion.risk,
            suggestion.title,
            suggestion.description,
            suggestion
                .command
                .as_deref()
                .map(|c| format!(" (`{c}`)"))
                .unwrap_or_default()
        );
    }
    findings += &format!("\nHypothesis ledger (cite its evidence by id):\n```json\n{ledger:#}\n```\n");
    let mut messages = vec![ChatMessage::system(INSTRUCTIONS), ChatMessage::user(findings)];
    // Read-only tools, and read-only diagnostic commands where a CLI is configured: an automatic
    // analysis never changes infrastructure (no one is there to confirm).
    let tools = Tool::specs(state.agent_cli.as_deref());
    let session = subject.session_id.to_string();
    let mut citations = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(state.config.rca_model_timeout_secs);
    for step in 1..=MAX_RCA_STEPS {
        let call = Call {
            user_id: subject.user_id,
            session_id: Some(&session),
            request_type: "rca",
        };
        // The last round offers no tools, so that the model writes the summary from what its
        // tools found rather than asking for more.
        let request = if step < MAX_RCA_STEPS {
            ChatRequest::new(messages.clone()).with_tools(tools.clone())
        } else {
            ChatRequest::new(messages.clone())
        };
        let completion = match tokio::time::timeout_at(deadline, model.complete(call, request)).await {
            Ok(Ok(completion)) => completion,
            Ok(Err(error)) => {
                tracing::warn!(%error, model = model.name(), incident_id = %subject.incident_id, "model summary failed; the built-in analyst's stands");
                return None;
            }
            Err(_) => {
                tracing::warn!(model = model.name(), incident_id = %subject.incident_id, limit_secs = state.config.rca_model_timeout_secs, "model summary ran out of time; the built-in analyst's stands");
                return None;
            }
        };
        if completion.tool_calls.is_empty() {
            // PostgreSQL stores no NUL, in text or JSON: a model that writes one must not fail
            // the analysis (as it did, on every attempt).
            let text = completion.text.replace('\0', "");
            let text = text.trim();
            return (!text.is_empty()).then(|| (text.to_owned(), citations));
        }
        messages.push(completion.to_message());
        for call in &completion.tool_calls {
            let output = match read_only_run(state, subject, &call.name, &call.arguments).await {
                Ok(value) => value.to_string(),
                Err(error) => format!("error: {error}"),
            }
            .replace('\0', "");
            let key = (citations.len() + 1).to_string();
            messages.push(ChatMessage::tool_result(&call.id, format!("[{key}] {output}")));
            citations.push(Citation {
                key,
                tool_name: Some(call.name.clone()),
                command: Some(call.arguments.clone()),
                output: output.chars().take(MAX_CITATION_CHARS).collect(),
                executed_at: Some(Utc::now()),
            });
        }
    }
    tracing::warn!(incident_id = %subject.incident_id, "the model called tools when offered none; the built-in summary stands");
    None
}
