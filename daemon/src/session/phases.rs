//! `WARDEN_EXEC_TRACE=1` in the daemon's environment prints, for every Exec
//! call, how long each stage of the pipeline took (µs of wall-clock time),
//! on the daemon's standard error: the figures behind the exec latency
//! benchmark (docs/sandbox.md, "Performance").

use std::sync::OnceLock;
use std::time::Instant;

static ENABLED: OnceLock<bool> = OnceLock::new();

/// Stage timer of one call; does nothing unless `WARDEN_EXEC_TRACE` is set.
pub(crate) struct Phases {
    start: Option<Instant>,
    last: Option<Instant>,
    marks: Vec<(&'static str, u128)>,
}

/// Whether `WARDEN_EXEC_TRACE` is set (read once).
pub(crate) fn enabled() -> bool {
    *ENABLED.get_or_init(|| std::env::var_os("WARDEN_EXEC_TRACE").is_some())
}

impl Phases {
    pub(crate) fn start() -> Phases {
        let on = enabled();
        let now = on.then(Instant::now);
        Phases {
            start: now,
            last: now,
            marks: Vec::new(),
        }
    }

    /// Ends the stage called `what`.
    pub(crate) fn mark(&mut self, what: &'static str) {
        if let Some(last) = self.last {
            let now = Instant::now();
            self.marks.push((what, (now - last).as_micros()));
            self.last = Some(now);
        }
    }
}

impl Drop for Phases {
    fn drop(&mut self) {
        if let Some(start) = self.start {
            let mut line = format!("exec-trace total {:>6} us:", start.elapsed().as_micros());
            for (what, us) in &self.marks {
                line.push_str(&format!(" {what} {us}"));
            }
            eprintln!("{line}");
        }
    }
}
