use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use vigil::{Application, Config};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "vigil", version, about = "Backend of an AI site-reliability agent")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    config: Config,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API and the WebSocket channel (the default).
    Serve,
    /// Run background jobs and event reactors only (no HTTP or WebSocket listener).
    Worker,
    /// Apply database migrations and exit.
    Migrate,
    /// Truncate read tables and rebuild them from the event store, then exit. Refused while a
    /// service (`vigil serve` or `vigil worker`) is connected to the database, unless `--online`.
    Replay {
        /// Only this projection (e.g. `chat_sessions`); all of them when absent.
        #[arg(long)]
        projection: Option<String>,
        /// Rebuild while the service runs: the read tables are built beside the live ones, kept
        /// current, and switched in at once when they have caught up (docs/operations.md).
        #[arg(long)]
        online: bool,
    },
    /// Replay a directory of labelled scenarios through the service on a scratch database (created
    /// on the server of DATABASE_URL and dropped afterwards) and score grouping and root causes.
    Eval(vigil::eval::EvalOptions),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let traces = vigil::telemetry::init()?;
    let outcome = run(cli).await;
    if let Some(traces) = traces {
        // Off the runtime: the exporter's blocking client must not run on it.
        let flushed = tokio::task::spawn_blocking(move || traces.shutdown()).await?;
        if let Err(error) = flushed {
            eprintln!("traces not all exported: {error}");
        }
    }
    outcome
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let shutdown = CancellationToken::new();
            tokio::spawn(stop_on_signal(shutdown.clone()));
            Application::build(cli.config).await?.run_until_stopped(shutdown).await
        }
        Command::Worker => {
            let shutdown = CancellationToken::new();
            tokio::spawn(stop_on_signal(shutdown.clone()));
            vigil::app::run_worker_process(cli.config, shutdown).await
        }
        Command::Migrate => {
            migrated_pool(&cli.config, vigil::db::SERVICE_APPLICATION_NAME).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Replay { projection, online } => {
            let db = migrated_pool(&cli.config, vigil::db::REPLAY_APPLICATION_NAME).await?;
            let events = vigil::event_store::EventStore::new(&db);
            let rebuilt = if online {
                vigil::replay::online(&events, &db, projection.as_deref()).await?
            } else {
                let running = vigil::db::service_connections(&db).await?;
                if running > 0 {
                    anyhow::bail!(
                        "a service is running against this database ({running} connections): stop it first, or \
                         pass --online to rebuild beside the live tables while it serves"
                    );
                }
                events.replay(&db, projection.as_deref()).await?
            };
            for (name, count) in rebuilt {
                tracing::info!(projection = name, events = count, "projection rebuilt");
            }
            Ok(())
        }
        Command::Eval(options) => {
            let scenarios = vigil::eval::scenario::load_dir(&options.dir)?;
            let report = vigil::eval::run(&cli.config, &scenarios, &options).await?;
            print!("{report}");
            Ok(())
        }
    }
}

async fn migrated_pool(config: &Config, application_name: &str) -> anyhow::Result<sqlx::PgPool> {
    vigil::db::create_if_missing(config).await?;
    let db = vigil::db::pool(config, application_name)?;
    vigil::db::migrate(&db).await?;
    Ok(db)
}

async fn stop_on_signal(shutdown: CancellationToken) {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}
