//! Why the daemon cannot start ([`DaemonError`]), the exit status each reason maps to, and
//! [`chain`], which prints an error with its causes on one line for the logs. Its own module
//! so that the run loop (`daemon`) and the sources' start-up (`feeds`) both use it without
//! one importing the other.

use std::fmt::Write as _;

use tierd_linux::read::ReadError;

/// Exit status of `tierd run` for a bad configuration (sysexits.h `EX_CONFIG`): the systemd
/// unit does not restart on it (`RestartPreventExitStatus=78`).
pub const EXIT_CONFIG: u8 = 78;
/// Exit status when nothing can run here at start: one memory tier, or no configured source
/// available (sysexits.h `EX_UNAVAILABLE`); restarted with systemd's back-off, since a
/// module load or a hotplugged node can change it.
pub const EXIT_UNAVAILABLE: u8 = 69;

/// Why the daemon cannot start. Nothing that happens once it runs is one of these.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A file the daemon needs at start could not be read.
    #[error("reading the machine's description")]
    Read(#[from] ReadError),
    /// The machine has nothing to tier.
    #[error("nothing to tier: {0}")]
    NothingToTier(String),
    /// The topology could not be turned into the engine's.
    #[error("topology")]
    Topology(#[from] tierd_linux::read::topology::ConvertError),
    /// `[topology]` does not fit this machine (a node it names has no memory, or a memory node
    /// it leaves out).
    #[error("[topology]: {0}")]
    TopologyOverride(String),
    /// The engine refuses the tiers `[topology]` makes of this machine.
    #[error("[topology]: the engine refuses the tiers it makes of this machine")]
    TopologyRefused(#[source] tierd_engine::topology::TopologyError),
    /// The engine refused the configuration.
    #[error("engine configuration")]
    Engine(#[from] tierd_engine::ConfigError),
    /// No configured source can run here.
    #[error("no hotness source can run here: {0}")]
    NoSource(String),
    /// `/proc` is not this process's pid namespace: the pids read there are not the ones
    /// `move_pages(2)` would move.
    #[error("{proc_root}: {reason}")]
    PidNamespace {
        /// The proc root.
        proc_root: std::path::PathBuf,
        /// What does not match.
        reason: String,
    },
    /// The recording (`--record`) could not start.
    #[error("starting the recording")]
    Record(#[from] tierd_trace::FileError),
}

impl DaemonError {
    /// The process exit status for this error ([`EXIT_CONFIG`] or [`EXIT_UNAVAILABLE`]).
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            DaemonError::Engine(_)
            | DaemonError::PidNamespace { .. }
            | DaemonError::TopologyOverride(_)
            | DaemonError::TopologyRefused(_)
            | DaemonError::Record(_) => EXIT_CONFIG,
            DaemonError::Read(_)
            | DaemonError::NothingToTier(_)
            | DaemonError::Topology(_)
            | DaemonError::NoSource(_) => EXIT_UNAVAILABLE,
        }
    }
}

/// An error and its causes on one line (`a: b: c`), for logs and for the CLI's last line:
/// `Display` of a typed error shows only its own level.
///
/// A cause whose text already ends the line is not printed again. The leaf errors that wrap
/// an OS error print it in their own message (`opening /x: Permission denied`) so that a
/// plain `Display` (a source's status reason, a test's message) says what failed, and they
/// also return it from `source()` so that `SourceError::errno()` can count faults by errno;
/// anyhow's `{:#}` would print such a cause twice (`cannot read: No such file (os error 2):
/// No such file (os error 2)`).
#[must_use]
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.ends_with(&text) {
            let _ = write!(s, ": {text}");
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enoent() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::ENOENT)
    }

    /// A leaf that leaves its OS error out of its message (written by hand: the user guide's
    /// test lists every `#[error]` message of the code).
    #[derive(Debug)]
    struct Hides(std::io::Error);

    impl std::fmt::Display for Hides {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("opening /sys/x")
        }
    }

    impl std::error::Error for Hides {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_the_message_already_ends_with_is_printed_once() {
        let os = enoent().to_string();
        // ReadError::Io says its OS error and returns it from source().
        let says = DaemonError::Read(ReadError::Io {
            path: "/sys/x".into(),
            source: enoent(),
        });
        assert_eq!(
            chain(&says),
            format!("reading the machine's description: cannot read /sys/x: {os}")
        );
        // A leaf that leaves it out gets it from the chain.
        assert_eq!(chain(&Hides(enoent())), format!("opening /sys/x: {os}"));
    }

    #[test]
    fn an_anyhow_error_prints_each_context_once() {
        let e = anyhow::Error::new(ReadError::Io {
            path: "/etc/tierd.toml".into(),
            source: enoent(),
        })
        .context("loading the configuration");
        let line = chain(e.as_ref());
        let os = enoent().to_string();
        assert_eq!(
            line,
            format!("loading the configuration: cannot read /etc/tierd.toml: {os}")
        );
        assert_eq!(line.matches(&os).count(), 1, "{line}");
    }
}
