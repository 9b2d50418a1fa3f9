//! The `pgmux` binary: reads the configuration, sets up logging, and runs the pooler, either as a sidecar
//! (SIGTERM / SIGINT begin a graceful shutdown) or, when Lambda started it, as a Lambda extension.

// Tests may use tokio's timers directly; pgmux's own code takes them from pgmux_timer (crates/clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod aws_login;
mod config_file;
mod emf;
mod lambda;
mod pool_login;
mod reload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use pgmux_proxy::config::credentials::CredentialsError;
use pgmux_proxy::config::{self, Config, LogFormat, Profile};
use pgmux_proxy::net::tls::TlsSetupError;
use pgmux_proxy::{Listener, ServerAccess, SetupError};

/// jemalloc rather than the system allocator: tokio aligns every task and socket registration to 128
/// bytes, which glibc serves with padding that fragments the heap. Measured with 10,000 idle clients:
/// 17.5 MB resident instead of 19.6 MB, and less user CPU per transaction (docs/benchmarks.md).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn usage() -> String {
    let mut s = String::from(
        "pgmux: a PostgreSQL transaction-mode connection pooler\n\n\
         Usage: pgmux [--config FILE | FILE] [--print-config] [-q | -v]\n       \
         pgmux check [--config FILE | FILE]\n\n\
         FILE is pgmux's TOML, or PgBouncer's pgbouncer.ini (a name ending in .ini, or a file whose first\n\
         section is [databases], [users], [pgbouncer] or [peers]; docs/migrating-from-pgbouncer.md).\n\n\
         Commands:\n  \
         check               connect, read max_connections and pg_stat_activity, print the connection budget,\n                      \
         the pgmux instances seen and the pool limit pgmux would use; exit 1 on any problem\n\n\
         Options:\n  \
         -c, --config FILE   read settings from FILE (TOML or PgBouncer's ini)\n      \
         --print-config  print the effective configuration (password hidden) and exit\n  \
         -q, --quiet         log warnings and errors only (unless PGMUX_LOG_LEVEL says otherwise)\n  \
         -v, --verbose       log at debug; -vv at trace (unless PGMUX_LOG_LEVEL says otherwise)\n  \
         -h, --help          print this help\n  \
         -V, --version       print the version\n\n\
         Settings (TOML key, environment variable that overrides it, default):\n",
    );
    for key in config::KEYS {
        let default = match (key.name, key.default) {
            ("database_url", _) => "(required unless secret_arn)",
            (_, "") => "(unset)",
            (_, default) => default,
        };
        s.push_str(&format!("  {:<24}{:<32}{}\n      {}\n", key.name, key.env_var(), default, key.help));
    }
    s
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Run { config: Option<PathBuf>, print: bool, log_level: Option<&'static str> },
    Check { config: Option<PathBuf> },
    Help,
    Version,
}

/// PgBouncer's flags that pgmux has no counterpart for, and what to do instead: scripts written for
/// PgBouncer pass them, and they deserve an answer rather than "unknown argument".
const PGBOUNCER_FLAGS: &[(&str, &str, &str)] = &[
    (
        "-d",
        "--daemon",
        "pgmux does not run as a daemon: run it in the foreground under systemd, a container runtime or another \
         supervisor",
    ),
    (
        "-R",
        "--reboot",
        "pgmux has no online restart: stop it with SIGTERM (open transactions may finish within \
         shutdown_timeout) and start it again",
    ),
    ("-u", "--user", "pgmux does not switch users: start it as the user it should run as"),
];

fn parse_args(args: impl IntoIterator<Item = String>) -> anyhow::Result<Command> {
    let mut config = None;
    let mut print = false;
    let mut check = false;
    let mut log_level = None;
    let mut verbose = 0;
    let mut args = args.into_iter().peekable();
    if args.peek().is_some_and(|a| a == "check") {
        args.next();
        check = true;
    }
    let mut set_config = |path: PathBuf| {
        if config.replace(path).is_some() {
            anyhow::bail!("more than one configuration file given; see pgmux --help");
        }
        Ok(())
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "-c" | "--config" => set_config(PathBuf::from(args.next().context("--config needs a file name")?))?,
            "--print-config" => print = true,
            "-q" | "--quiet" => log_level = Some("warn"),
            "--verbose" => verbose += 1,
            // -v, -vv, -vvv, as PgBouncer counts them.
            v if v.len() > 1 && v.starts_with('-') && v[1..].chars().all(|c| c == 'v') => verbose += v.len() - 1,
            other => {
                let flag = other.split_once('=').map_or(other, |(flag, _)| flag);
                if let Some((_, _, why)) =
                    PGBOUNCER_FLAGS.iter().find(|(short, long, _)| flag == *short || flag == *long)
                {
                    anyhow::bail!("{flag}: {why}");
                }
                match other.strip_prefix("--config=") {
                    Some(path) => set_config(PathBuf::from(path))?,
                    None if !other.starts_with('-') => set_config(PathBuf::from(other))?,
                    None => anyhow::bail!("unknown argument {other:?}; see pgmux --help"),
                }
            }
        }
    }
    match verbose {
        0 => {}
        1 => log_level = Some("debug"),
        _ => log_level = Some("trace"),
    }
    match (check, print) {
        (true, true) => anyhow::bail!("pgmux check does not take --print-config"),
        (true, false) => Ok(Command::Check { config }),
        (false, _) => Ok(Command::Run { config, print, log_level }),
    }
}

/// Sets up logging; returns what changes the level later (a reload).
fn init_logging(cfg: &Config) -> anyhow::Result<reload::SetLogLevel> {
    let filter = tracing_subscriber::EnvFilter::try_new(&cfg.log_level)
        .with_context(|| format!("invalid value for log_level: {:?}", cfg.log_level))?;
    // Colours only on a terminal: a log file, journald or CloudWatch gets the text alone, which `grep` and
    // log processors read as written.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let set = |new: &str| tracing_subscriber::EnvFilter::try_new(new);
    Ok(match cfg.log_format {
        LogFormat::Json => {
            let builder = builder.json().flatten_event(true).with_filter_reloading();
            let handle = builder.reload_handle();
            builder.init();
            Box::new(move |level| Ok(handle.reload(set(level)?)?))
        }
        LogFormat::Text => {
            let builder = builder.with_filter_reloading();
            let handle = builder.reload_handle();
            builder.init();
            Box::new(move |level| Ok(handle.reload(set(level)?)?))
        }
    })
}

/// A reason start-up failed, with the `Category.Reason` type Lambda's init/error wants. The category is
/// always `Extension`: Lambda keeps an extension's own error type only when it starts with `Extension.`
/// (anything else reaches the user as `Extension.InitError`, without pgmux's reason).
#[derive(Debug)]
pub struct StartError {
    kind: &'static str,
    message: String,
}

impl StartError {
    fn new(kind: &'static str, message: impl Into<String>) -> Self {
        StartError { kind, message: message.into() }
    }
}

impl From<SetupError> for StartError {
    fn from(e: SetupError) -> Self {
        let kind = match e {
            SetupError::Bind { .. } | SetupError::BindUnix { .. } => "Extension.ListenFailed",
            SetupError::Tls(_) | SetupError::AuthFile(_) | SetupError::NoControlUser => "Extension.ConfigInvalid",
            SetupError::Check(_) => "Extension.DatabaseUnreachable",
        };
        StartError::new(kind, e.to_string())
    }
}

/// What the logins need could not be built from the configuration: at start-up and on every reload.
#[derive(Debug, thiserror::Error)]
enum AccessError {
    /// The secret, IAM or the AWS credentials are set up wrongly.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// The RDS CA bundle built into pgmux does not parse: a fault of the build, not of the setup.
    #[error(transparent)]
    RdsBundle(#[from] TlsSetupError),
}

impl From<AccessError> for StartError {
    fn from(e: AccessError) -> Self {
        let kind = match e {
            AccessError::Credentials(_) => "Extension.CredentialsInvalid",
            AccessError::RdsBundle(_) => "Extension.Internal",
        };
        StartError::new(kind, e.to_string())
    }
}

/// Reports what stopped start-up: on stderr, and in Lambda mode to Lambda through extension/init/error.
fn fatal(lambda: bool, error: &StartError) -> ExitCode {
    eprintln!("pgmux: {}", error.message);
    if lambda {
        let reported = tokio::runtime::Builder::new_current_thread().enable_all().build().map(|rt| {
            rt.block_on(pgmux_aws::extension::report_init_error(&lambda::extension_name(), error.kind, &error.message))
        });
        if let Ok(Err(e)) = reported {
            eprintln!("pgmux: could not report the error to Lambda: {e}");
        }
    }
    ExitCode::from(2)
}

/// The RDS CA bundle, trusted for the database besides `ssl_root_cert`.
fn rds_roots() -> Result<Vec<pgmux_proxy::net::tls::CertificateDer<'static>>, TlsSetupError> {
    pgmux_proxy::net::tls::certs_from_pem("built-in RDS CA bundle", pgmux_aws::rds_ca_bundle_pem())
}

fn server_access(cfg: &Config) -> Result<ServerAccess, AccessError> {
    let credentials = aws_login::AwsLogin::from_config(cfg)?
        .map(|c| Arc::new(c) as Arc<dyn pgmux_proxy::config::credentials::Credentials>);
    // Parsing the bundle costs a few hundred microseconds of every start; only a verifying sslmode reads it.
    let extra_root_certs = if cfg.effective_sslmode().verifies_certificate() { rds_roots()? } else { Vec::new() };
    // Pools of named databases with auth = iam or secret; their AWS parts are made when one first logs in.
    let pool_credentials =
        Some(Arc::new(pool_login::AwsPoolLogins::from_env())
            as Arc<dyn pgmux_proxy::config::credentials::PoolCredentials>);
    Ok(ServerAccess { credentials, extra_root_certs, pool_credentials, instance_endpoints: None })
}

/// `pgmux check`: prints the report; exit 0 if pgmux can size its pool, 1 with the problems otherwise.
async fn check(cfg: Config) -> ExitCode {
    let extras = match server_access(&cfg) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("pgmux check: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("database                                 {}", cfg.database_url);
    let report = match Listener::check(cfg, extras).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pgmux check: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{report}");
    let problems = report.problems();
    if problems.is_empty() {
        println!("ok");
        return ExitCode::SUCCESS;
    }
    for p in problems {
        eprintln!("pgmux check: {p}");
    }
    ExitCode::FAILURE
}

async fn serve(cfg: Config, lambda: bool, source: Arc<dyn pgmux_proxy::ConfigSource>) -> Result<(), StartError> {
    let extras = server_access(&cfg)?;
    let proxy = Listener::bind_with(cfg, extras).await?;
    proxy.set_config_source(source);
    if lambda {
        return lambda::run(proxy).await;
    }
    reload::on_sighup(proxy.admin())
        .map_err(|e| StartError::new("Extension.Internal", format!("cannot watch SIGHUP: {e}")))?;
    on_pause_signals(proxy.admin())
        .map_err(|e| StartError::new("Extension.Internal", format!("cannot watch SIGUSR1 / SIGUSR2: {e}")))?;
    let stop = proxy.stop();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| StartError::new("Extension.Internal", format!("cannot watch SIGTERM: {e}")))?;
    tokio::spawn(async move {
        tokio::select! {
            _ = sigterm.recv() => tracing::info!("SIGTERM received"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        }
        stop.begin_graceful();
    });
    proxy.run().await;
    Ok(())
}

/// PgBouncer's signals for PAUSE (`SIGUSR1`) and RESUME (`SIGUSR2`), which its operators' scripts send.
fn on_pause_signals(admin: pgmux_proxy::Admin) -> Result<(), std::io::Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = usr1.recv() => {
                    tracing::info!("got SIGUSR1, pausing all activity");
                    admin.pause();
                }
                Some(()) = usr2.recv() => {
                    if admin.resume() {
                        tracing::info!("got SIGUSR2, continuing");
                    } else {
                        tracing::info!("got SIGUSR2 while shutting down, ignoring");
                    }
                }
                else => return,
            }
        }
    });
    Ok(())
}

fn main() -> ExitCode {
    let command = match parse_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pgmux: {e}");
            return ExitCode::from(2);
        }
    };
    let (path, print, checking, log_level) = match command {
        Command::Help => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Command::Version => {
            println!("pgmux {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Command::Run { config, print, log_level } => (config, print, false, log_level),
        Command::Check { config } => (config, false, true, None),
    };
    let lambda = lambda::detected() && !checking;
    let profile = match (lambda, lambda::managed_instances()) {
        (false, _) => Profile::Sidecar,
        (true, false) => Profile::Lambda,
        (true, true) => Profile::LambdaManaged,
    };
    let loaded = match config_file::load(profile, path.as_deref(), config_file::env(log_level)) {
        Ok(loaded) => loaded,
        Err(e) => return fatal(lambda, &StartError::new("Extension.ConfigInvalid", e.to_string())),
    };
    let cfg = loaded.config.clone();
    if (print || checking)
        && let Some(warning) = &loaded.warning
    {
        eprintln!("pgmux: {warning}");
    }
    if print {
        print!("{cfg}");
        return ExitCode::SUCCESS;
    }
    if checking {
        return match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(check(cfg)),
            Err(e) => {
                eprintln!("pgmux: cannot start the runtime: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let set_log_level = match init_logging(&cfg) {
        Ok(set) => set,
        Err(e) => return fatal(lambda, &StartError::new("Extension.ConfigInvalid", format!("{e:#}"))),
    };
    loaded.warn();
    let source = reload::source(path, profile, log_level, set_log_level);
    let runtime = match relay_runtime(cfg.workers) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pgmux: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(cfg, lambda, source)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error_type = e.kind, "{}", e.message);
            fatal(lambda, &e)
        }
    }
}

/// The runtime that serves clients. One worker: a current-thread runtime, no work stealing, no cross-thread
/// wake-ups. No time driver on the relay's threads: pgmux's timers live on a thread of their own
/// (pgmux_timer), so that a park of the relay pays for no timer wheel.
fn relay_runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    pgmux_timer::route_here().map_err(|e| std::io::Error::other(format!("no timer thread: {e}")))?;
    match workers {
        1 => tokio::runtime::Builder::new_current_thread().enable_io().build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_io()
            .on_thread_start(|| {
                // The timer thread runs already (above), so marking cannot fail.
                let _ = pgmux_timer::route_here();
            })
            .build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        assert_eq!(parse_args(args(&[])).unwrap(), Command::Run { config: None, print: false, log_level: None });
        assert_eq!(
            parse_args(args(&["--config", "a.toml", "--print-config"])).unwrap(),
            Command::Run { config: Some("a.toml".into()), print: true, log_level: None }
        );
        assert_eq!(
            parse_args(args(&["--config=b.toml"])).unwrap(),
            Command::Run { config: Some("b.toml".into()), print: false, log_level: None }
        );
        assert_eq!(parse_args(args(&["-h"])).unwrap(), Command::Help);
        assert!(parse_args(args(&["--bogus"])).is_err());
        assert!(parse_args(args(&["--config"])).is_err());
        assert_eq!(parse_args(args(&["check"])).unwrap(), Command::Check { config: None });
        assert_eq!(
            parse_args(args(&["check", "-c", "c.toml"])).unwrap(),
            Command::Check { config: Some("c.toml".into()) }
        );
        assert!(parse_args(args(&["check", "--print-config"])).is_err());
    }

    #[test]
    fn pgbouncers_command_line_works_or_says_why_not() {
        // As PgBouncer's test suite starts it.
        assert_eq!(
            parse_args(args(&["--quiet", "/tmp/x/test.ini"])).unwrap(),
            Command::Run { config: Some("/tmp/x/test.ini".into()), print: false, log_level: Some("warn") }
        );
        let run = |a: &[&str]| match parse_args(args(a)).unwrap() {
            Command::Run { config, log_level, .. } => (config, log_level),
            other => panic!("{other:?}"),
        };
        assert_eq!(run(&["-v", "pgbouncer.ini"]), (Some("pgbouncer.ini".into()), Some("debug")));
        assert_eq!(run(&["pgbouncer.ini", "-vv"]).1, Some("trace"));
        assert_eq!(run(&["-v", "--verbose", "-q"]).1, Some("trace"), "verbosity counts, as in PgBouncer");
        assert_eq!(run(&["-q"]).1, Some("warn"));
        assert_eq!(
            parse_args(args(&["check", "pgbouncer.ini"])).unwrap(),
            Command::Check { config: Some("pgbouncer.ini".into()) }
        );
        for flag in ["-d", "--daemon", "-R", "--reboot", "-u", "--user=postgres"] {
            let err = parse_args(args(&[flag, "pgbouncer.ini"])).expect_err(flag).to_string();
            assert!(err.starts_with(flag.split('=').next().unwrap()) && err.contains("pgmux"), "{flag}: {err}");
        }
        assert!(parse_args(args(&["-d", "x.ini"])).unwrap_err().to_string().contains("foreground"));
        let two = parse_args(args(&["a.ini", "--config", "b.toml"])).unwrap_err().to_string();
        assert!(two.contains("more than one configuration file"), "{two}");
    }

    #[test]
    fn the_readme_documents_every_key() {
        let readme = include_str!("../../README.md");
        for key in config::KEYS {
            assert!(readme.contains(&format!("| `{}` |", key.name)), "README.md does not document {}", key.name);
        }
    }

    #[test]
    fn help_lists_every_key_with_its_environment_variable() {
        let help = usage();
        for key in config::KEYS {
            assert!(help.contains(key.name) && help.contains(&key.env_var()), "{} missing", key.name);
        }
    }
}
