//! Time relative to the fault: every record of a scenario is in milliseconds since (or, negative, before)
//! the moment the fault is injected, so that clients, injectors and observers on different threads agree.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    t0: Instant,
}

impl Clock {
    /// A clock whose fault time is `lead` from now.
    pub fn fault_in(lead: Duration) -> Clock {
        Clock { t0: Instant::now() + lead }
    }

    /// Milliseconds since the fault (negative before it).
    pub fn now_ms(&self) -> f64 {
        let now = Instant::now();
        if now >= self.t0 { (now - self.t0).as_secs_f64() * 1000.0 } else { -((self.t0 - now).as_secs_f64() * 1000.0) }
    }

    /// `at` in milliseconds since the fault (negative before it).
    pub fn ms_of(&self, at: Instant) -> f64 {
        if at >= self.t0 { (at - self.t0).as_secs_f64() * 1000.0 } else { -((self.t0 - at).as_secs_f64() * 1000.0) }
    }

    /// The instant `ms` milliseconds after (or, negative, before) the fault.
    pub fn instant_at(&self, ms: f64) -> Instant {
        let offset = Duration::from_secs_f64(ms.abs() / 1000.0);
        if ms >= 0.0 { self.t0 + offset } else { self.t0.checked_sub(offset).unwrap_or(self.t0) }
    }

    /// Block this (non-async) thread until `ms` after the fault.
    pub fn sleep_until_blocking(&self, ms: f64) {
        let target = self.instant_at(ms);
        let now = Instant::now();
        if target > now {
            std::thread::sleep(target - now);
        }
    }
}
