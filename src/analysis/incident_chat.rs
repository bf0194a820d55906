//! Questions about one incident asked over HTTP (`POST /api/incidents/:id/chat`): a background
//! job answers them with the chat agent, the incident as context, into a chat session.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::{
    agent::{self, Ending, Outbox},
    jobs::{JobContext, JobFailure, JobHandler},
    state::AppState,
    ws::protocol::{ChatQuery, Mode},
};

pub use crate::jobs::kinds::INCIDENT_CHAT_JOB;

#[derive(Debug, Serialize, Deserialize)]
pub struct IncidentChatPayload {
    pub user_id: String,
    pub session_id: Uuid,
    pub incident_id: Uuid,
    pub question: String,
    pub ask_mode: bool,
}

pub struct IncidentChatHandler {
    pub state: AppState,
}

#[async_trait]
impl JobHandler for IncidentChatHandler {
    fn kind(&self) -> &'static str {
        INCIDENT_CHAT_JOB
    }

    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure> {
        let payload: IncidentChatPayload = job.payload_as()?;
        let query = ChatQuery {
            query: payload.question,
            user_id: payload.user_id,
            session_id: payload.session_id.to_string(),
            model: None,
            // A background job cannot ask for a confirmation: infrastructure changes are refused.
            mode: if payload.ask_mode { Mode::Ask } else { Mode::Agent },
            selected_project_id: None,
            attachments: Vec::new(),
            ui_state: None,
            direct_tool_call: None,
        };
        // No socket asked: the answer is read from the session (and streamed to sockets following
        // it), and mutating commands are declined, as nobody is there to confirm them.
        let (outbox, listener) = Outbox::new(1);
        drop(listener);
        let outbox = outbox.relaying(self.state.session_fanout.clone(), payload.session_id, None);
        // After the reply running in the session, if any: one conversation at a time.
        let _turn = self.state.reply_turns.take(payload.session_id).await;
        let ending = agent::answer(
            self.state.clone(),
            query,
            payload.session_id,
            Some(payload.incident_id),
            outbox,
            Default::default(),
            Default::default(),
        )
        .await;
        Ok(json!({ "ending": format!("{ending:?}").to_lowercase(), "complete": ending == Ending::Complete }))
    }
}
