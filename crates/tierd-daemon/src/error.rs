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

/// An error and its causes on one line (`a: b: c`), for logs: `Display` of a typed error
/// shows only its own level.
#[must_use]
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let _ = write!(s, ": {c}");
        cur = c.source();
    }
    s
}
