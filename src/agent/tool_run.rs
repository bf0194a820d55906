//! One tool call of a reply, end to end: classification, the user's confirmation of anything that
//! changes infrastructure, execution under a time limit, and the messages that report it.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use uuid::Uuid;
use vigil_aggregates::chat_session::ToolCall as StoredToolCall;

use super::{cli, cli::CommandKind, tools::Tool, Turn};
use crate::ws::protocol::{Mode, ServerMessage, Severity, ToolCallStatus};

impl Turn<'_> {
    /// Runs one tool call end to end (classification, confirmation, execution, the `tool_call`
    /// and `tool_result` messages) and returns the output the model and the stored message get.
    pub(super) async fn run_tool(&mut self, call_id: &str, name: &str, given: &Value) -> String {
        // What was written before the call is read before it ("Let me look."), not after its result.
        self.send_held_back_text();
        // A tool call's input is an object (spec): none is `{}`; anything else (a model's array,
        // or arguments that are not JSON at all) is reported as `{"raw": ...}` and not run.
        let (input, malformed) = match given {
            Value::Object(_) => (given.clone(), false),
            Value::Null => (json!({}), false),
            other => (json!({ "raw": other }), true),
        };
        let input = &input;
        let sid = self.sid;
        let report = |status: &'static str, output: Option<&str>| {
            ServerMessage::tool_call(
                sid,
                &ToolCallStatus {
                    tool_call_id: call_id,
                    tool_name: name,
                    input,
                    status,
                    output,
                },
            )
        };
        self.outbox.send(report("running", None));
        self.running = Some((call_id.to_owned(), name.to_owned(), input.clone()));
        let result = match Tool::named(name) {
            _ if malformed => Err("the tool's input must be a JSON object of its arguments".to_owned()),
            None => Err(format!("there is no tool named {name}")),
            Some(tool) => self.permitted_run(tool, input).await,
        };
        self.running = None;
        let output = match &result {
            Ok(value) => value.as_str().map_or_else(|| value.to_string(), str::to_owned),
            Err(message) => message.clone(),
        };
        match &result {
            Ok(value) => {
                self.outbox.send(report("success", Some(&output)));
                self.outbox
                    .send(ServerMessage::tool_result(self.sid, name, value.clone()));
            }
            Err(message) => {
                self.outbox.send(report("error", Some(&output)));
                self.outbox.send(ServerMessage::session_error(
                    self.sid,
                    format!("tool {name} failed: {message}"),
                    Severity::Warning,
                    Some("TOOL_FAILED"),
                ));
            }
        }
        self.tool_calls.push(StoredToolCall {
            tool_name: name.to_owned(),
            input: input.clone(),
            output: output.clone(),
            extra: Default::default(),
        });
        output
    }

    async fn permitted_run(&mut self, tool: Tool, input: &Value) -> Result<Value, String> {
        let kind = tool.classify(input).map_err(|error| error.to_string())?;
        tool.check(self.state, self.user_id, input)
            .await
            .map_err(|error| error.to_string())?;
        if kind == CommandKind::Mutating {
            match self.mode {
                Mode::Ask => {
                    self.outbox.send(ServerMessage::session_error(
                        self.sid,
                        "this command would change infrastructure, and the session is in ask (read-only) mode; \
                         switch to agent mode to run it",
                        Severity::Error,
                        Some("READ_ONLY_MODE"),
                    ));
                    return Err("refused: ask mode is read-only".into());
                }
                Mode::Agent => self.confirmed(tool, input).await.map_err(str::to_owned)?,
            }
        }
        let limit = Duration::from_secs(self.state.config.agent_tool_timeout_secs);
        match tokio::time::timeout(
            limit,
            tool.run(self.state, self.user_id, self.session_id, self.mode.access(), input),
        )
        .await
        {
            Ok(result) => result.map_err(|error| error.to_string()),
            Err(_) => Err(format!("{} did not finish within {} s", tool.name(), limit.as_secs())),
        }
    }

    /// Asks the user to approve a mutating call; silence until the timeout is a refusal. The
    /// error says why the call does not run.
    async fn confirmed(&mut self, tool: Tool, input: &Value) -> Result<(), &'static str> {
        if self.outbox.is_closed() {
            return Err("not run: nobody is connected to confirm it");
        }
        let confirmation_id = Uuid::new_v4().to_string();
        let (answer, answered) = oneshot::channel();
        self.confirmations
            .insert(confirmation_id.clone(), (self.session_id, answer));
        let command = input.get("command").and_then(Value::as_str).unwrap_or_default();
        self.outbox.send(ServerMessage::confirmation_request(
            self.sid,
            &confirmation_id,
            tool.name(),
            json!({ "command": command, "reason": "this command may change infrastructure" }),
            cli::parse(command)
                .map(|argv| argv.into_iter().take(1).collect())
                .unwrap_or_default(),
        ));
        let wait = Duration::from_secs(self.state.config.agent_confirmation_timeout_secs);
        let answer = tokio::time::timeout(wait, answered).await;
        self.confirmations.remove(&confirmation_id);
        match answer {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err("not run: the user declined the confirmation"),
            // The pending confirmation was dropped: the user cancelled the turn.
            Ok(Err(_)) => Err("not run: the user cancelled"),
            Err(_) => Err("not run: the confirmation was not answered in time (counted as declined)"),
        }
    }
}
