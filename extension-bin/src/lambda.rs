//! Running as an AWS Lambda external extension: register for SHUTDOWN only (Lambda Managed Instances
//! rejects INVOKE; on classic Lambda it is enough), keep serving while the environment lives, and on
//! SHUTDOWN drain and exit before the deadline.
//!
//! The listener is bound before registering, so the function's own init can connect at once; pgmux itself
//! does not talk to the database before `event/next` is called (the control connection that sizes the pool
//! and `min_pool_size` wait for it); the pool opens connections when clients need them.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use pgmux_proxy::Listener;

use crate::StartError;
use crate::emf::Emf;

/// Time kept back from Lambda's SHUTDOWN deadline to close server connections and exit.
const EXIT_MARGIN: Duration = Duration::from_millis(300);

/// True when Lambda started this process (the Runtime API address is set).
pub fn detected() -> bool {
    std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some()
}

/// True on Lambda Managed Instances, where one execution environment serves many invocations at once.
pub fn managed_instances() -> bool {
    std::env::var("AWS_LAMBDA_INITIALIZATION_TYPE").is_ok_and(|v| v == "lambda-managed-instances")
}

/// The extension's name: the file name Lambda started it from (`/opt/extensions/pgmux`).
pub fn extension_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| std::path::Path::new(&a).file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "pgmux".to_owned())
}

/// Registers, serves until SHUTDOWN, then stops within the deadline.
pub async fn run(mut proxy: Listener) -> Result<(), StartError> {
    let name = extension_name();
    let mut extension = pgmux_aws::extension::start(&name)
        .await
        .map_err(|e| StartError::new("Extension.RegisterFailed", format!("cannot register with Lambda: {e}")))?;
    let mode = std::env::var("AWS_LAMBDA_INITIALIZATION_TYPE").unwrap_or_default();
    tracing::info!(extension = %name, initialization_type = %mode, "registered as a Lambda extension (SHUTDOWN only)");
    if let Some(gate) = extension.take_next_called() {
        proxy.hold_database_until(gate);
    }
    let stop = proxy.stop();
    let proxy_admin = proxy.admin();
    let emf = Arc::new(Mutex::new(Emf::new(proxy.admin())));
    let timed = tokio::spawn(flush_every_interval(Arc::clone(&emf)));
    let mut served = tokio::spawn(proxy.run());
    let deadline = tokio::select! {
        shutdown = extension.shutdown() => match shutdown {
            Ok(s) => {
                tracing::info!(reason = %s.reason, deadline_ms = s.deadline_ms, "SHUTDOWN received");
                Some(until_epoch_ms(s.deadline_ms))
            }
            Err(e) => {
                tracing::error!(error = %e, "lost the Lambda Extensions API; shutting down");
                None
            }
        },
        _ = &mut served => return Ok(()),
    };
    // The last flush reports the connections as they were before the drain closes them all: on classic
    // Lambda it may be the only flush the environment ever makes.
    let before_drain = proxy_admin.metrics();
    stop.begin_graceful();
    let grace = deadline.unwrap_or(Duration::ZERO).saturating_sub(EXIT_MARGIN);
    if pgmux_timer::timeout(grace, &mut served).await.is_err() {
        tracing::warn!(?grace, "transactions still open at the shutdown deadline; closing them");
        stop.force();
        let _ = served.await;
    }
    // Last: everything measured since the previous flush, the drain included, before the deadline.
    timed.abort();
    emf.lock().flush_with_gauges_of(&before_drain);
    Ok(())
}

/// Flushes the CloudWatch metrics every `metrics_interval` (read anew each time: a reload may change it).
/// On classic Lambda the timer sleeps while the environment is frozen; nothing is lost, the next flush
/// carries it.
async fn flush_every_interval(emf: Arc<Mutex<Emf>>) {
    loop {
        let interval = emf.lock().interval();
        pgmux_timer::sleep(interval.unwrap_or(Duration::from_secs(1))).await;
        if interval.is_some() {
            emf.lock().flush();
        }
    }
}

/// How long until an absolute deadline in Unix epoch milliseconds (zero if it has passed).
fn until_epoch_ms(deadline_ms: u64) -> Duration {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_epoch_milliseconds() {
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        let left = until_epoch_ms(now_ms + 2000);
        assert!(left <= Duration::from_millis(2000) && left >= Duration::from_millis(1900), "{left:?}");
        assert_eq!(until_epoch_ms(now_ms - 10), Duration::ZERO);
    }
}
