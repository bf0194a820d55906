//! The cloud command tool's guard rails: which programs may run, whether a command only reads, and
//! how it runs (no shell, a clean environment, a working directory per session, a time limit).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::process::Command;
use uuid::Uuid;

/// Most bytes of stdout or stderr kept from one command.
const MAX_OUTPUT_BYTES: usize = 16 * 1024;

/// Verbs that only read, across the provider CLIs (`aws ec2 describe-instances`, `kubectl get`,
/// `gcloud compute instances list`, `az vm show`, `scw instance server list`, `tailscale status`).
const READ_VERBS: &[&str] = &[
    "list",
    "ls",
    "get",
    "describe",
    "show",
    "logs",
    "top",
    "status",
    "version",
    "help",
    "explain",
    "whoami",
    "ip",
    "netcheck",
    "api-resources",
    "api-versions",
    "cluster-info",
    "get-caller-identity",
    "read",
    "info",
];
/// Verb prefixes of read-only operations (`describe-instances`, `list-buckets`, `get-policy`).
const READ_PREFIXES: &[&str] = &["describe-", "list-", "get-"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandKind {
    ReadOnly,
    /// May change infrastructure: needs a confirmation in agent mode, refused in ask mode.
    Mutating,
}

/// Where provider CLIs are taken from, and which of them may run.
#[derive(Clone, Debug)]
pub struct CliConfig {
    pub bin_dir: PathBuf,
    pub allowed: Vec<String>,
}

pub struct CommandOutput {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Splits a command line the way a POSIX shell would quote it, without running a shell.
pub fn parse(command: &str) -> Result<Vec<String>, String> {
    let argv = shlex::split(command).ok_or_else(|| "the command has unbalanced quotes".to_owned())?;
    if argv.is_empty() {
        return Err("the command is empty".into());
    }
    Ok(argv)
}

/// A command is read-only only when one of its words is a read verb and none is anything else
/// that looks like an action; whatever is not recognised counts as mutating.
pub fn classify(argv: &[String]) -> CommandKind {
    let words: Vec<&str> = argv
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|word| !word.starts_with('-'))
        .collect();
    let is_read =
        |word: &str| READ_VERBS.contains(&word) || READ_PREFIXES.iter().any(|prefix| word.starts_with(prefix));
    // A verb is a plain lowercase word; resource names and ids (with digits, dots, slashes) are not.
    let is_verb = |word: &str| word.len() > 1 && word.chars().all(|c| c.is_ascii_lowercase() || c == '-');
    let verbs: Vec<&str> = words.iter().copied().filter(|word| is_verb(word)).collect();
    let reads = verbs.iter().any(|verb| is_read(verb));
    let acts = verbs.iter().any(|verb| is_action(verb));
    if reads && !acts {
        CommandKind::ReadOnly
    } else {
        CommandKind::Mutating
    }
}

/// Verbs that change something, from the same CLIs.
fn is_action(verb: &str) -> bool {
    const ACTIONS: &[&str] = &[
        "create",
        "delete",
        "rm",
        "remove",
        "update",
        "set",
        "apply",
        "patch",
        "replace",
        "scale",
        "deploy",
        "start",
        "stop",
        "restart",
        "reboot",
        "terminate",
        "destroy",
        "put",
        "cp",
        "mv",
        "sync",
        "edit",
        "label",
        "annotate",
        "drain",
        "cordon",
        "uncordon",
        "taint",
        "rollout",
        "exec",
        "run",
        "attach",
        "up",
        "down",
        "login",
        "logout",
        "resize",
        "add",
        "enable",
        "disable",
        "attach-role-policy",
        "invoke",
        "import",
    ];
    const ACTION_PREFIXES: &[&str] = &[
        "create-",
        "delete-",
        "update-",
        "put-",
        "set-",
        "start-",
        "stop-",
        "terminate-",
        "modify-",
        "attach-",
        "detach-",
        "reboot-",
        "run-",
        "add-",
        "remove-",
        "enable-",
        "disable-",
    ];
    ACTIONS.contains(&verb) || ACTION_PREFIXES.iter().any(|prefix| verb.starts_with(prefix))
}

impl CliConfig {
    /// Runs an allow-listed program from `bin_dir` with no shell and a clean environment (but for
    /// the user's `credentials` for the program's provider), in the
    /// session's own working directory under `data_dir`, killed when `timeout` passes.
    pub async fn run(
        &self,
        argv: &[String],
        data_dir: &Path,
        session_id: Uuid,
        credentials: &[(&str, String)],
        timeout: Duration,
    ) -> Result<CommandOutput, String> {
        let program = &argv[0];
        if !self.allowed.iter().any(|allowed| allowed == program) {
            return Err(format!(
                "{program} is not an allowed program; allowed: {}",
                self.allowed.join(", ")
            ));
        }
        let executable = self.bin_dir.join(program);
        if !executable.is_file() {
            return Err(format!("{program} is not installed on this server"));
        }
        let workdir = data_dir.join("sessions").join(session_id.to_string()).join("workspace");
        tokio::fs::create_dir_all(&workdir)
            .await
            .map_err(|error| format!("cannot prepare the session's working directory: {error}"))?;
        let child = Command::new(&executable)
            .args(&argv[1..])
            .current_dir(&workdir)
            .env_clear()
            .env("PATH", &self.bin_dir)
            .env("HOME", &workdir)
            .envs(credentials.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("{program} could not start: {error}"))?;
        let output = tokio::time::timeout(timeout, child.wait_with_output())
            .await
            .map_err(|_| {
                format!(
                    "{program} did not finish within {} s and was stopped",
                    timeout.as_secs()
                )
            })?
            .map_err(|error| format!("{program} failed: {error}"))?;
        Ok(CommandOutput {
            exit_code: output.status.code(),
            stdout: truncated(&output.stdout),
            stderr: truncated(&output.stderr),
        })
    }
}

/// The output as text for the model and the saved conversation: at most [`MAX_OUTPUT_BYTES`],
/// without NUL characters (binary output has them; PostgreSQL stores none).
fn truncated(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_OUTPUT_BYTES)]).replace('\0', "");
    if bytes.len() > MAX_OUTPUT_BYTES {
        format!("{text}\n[output truncated at {MAX_OUTPUT_BYTES} bytes]")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(command: &str) -> CommandKind {
        classify(&parse(command).unwrap())
    }

    #[test]
    fn binary_output_loses_its_nul_characters() {
        assert_eq!(truncated(b"a\0b\0"), "ab");
    }

    #[test]
    fn reads_are_read_only() {
        for command in [
            "aws ec2 describe-instances --region eu-west-1",
            "aws s3 ls s3://bucket",
            "kubectl get pods -n payments",
            "kubectl logs checkout-7f9 --tail 100",
            "gcloud compute instances list --project p-1",
            "az vm show --name web-1",
            "scw instance server list",
            "tailscale status",
        ] {
            assert_eq!(kind(command), CommandKind::ReadOnly, "{command}");
        }
    }

    #[test]
    fn changes_and_unknown_verbs_are_mutating() {
        for command in [
            "aws ec2 terminate-instances --instance-ids i-1",
            "aws s3 rm s3://bucket/key",
            "kubectl delete pod checkout-7f9",
            "kubectl scale deployment checkout --replicas 0",
            "gcloud compute instances delete web-1",
            "az vm restart --name web-1",
            "kubectl get pods && kubectl delete pods --all",
            "aws frobnicate",
            "kubectl",
        ] {
            assert_eq!(kind(command), CommandKind::Mutating, "{command}");
        }
    }

    #[test]
    fn quoting_is_parsed_without_a_shell() {
        assert_eq!(parse("aws s3 ls 's3://my bucket'").unwrap()[3], "s3://my bucket");
        assert!(parse("aws 's3").is_err());
        assert!(parse("   ").is_err());
    }

    #[tokio::test]
    async fn only_allow_listed_programs_from_the_directory_run() {
        let dir = std::env::temp_dir().join(format!("vigil-cli-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let cli = CliConfig {
            bin_dir: dir.clone(),
            allowed: vec!["aws".into()],
        };
        let argv = |command: &str| parse(command).unwrap();
        let timeout = Duration::from_secs(5);
        let refused = cli.run(&argv("sh -c true"), &dir, Uuid::new_v4(), &[], timeout).await;
        assert!(refused.err().unwrap().contains("not an allowed program"));
        let missing = cli.run(&argv("aws s3 ls"), &dir, Uuid::new_v4(), &[], timeout).await;
        assert!(missing.err().unwrap().contains("not installed"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
