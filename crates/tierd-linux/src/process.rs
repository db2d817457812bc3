//! A process held by identity, not by pid number.
//!
//! A pid names whichever process holds it now: one that exits frees its pid, and the kernel
//! hands it to the next process once the pid space wraps (kernel/pid.c `alloc_pid`, cyclic
//! up to `pid_max`). The daemon reads a process at one refresh and moves its pages up to a
//! refresh later, so it holds each process in scope by a pidfd (Linux 5.3+), which stays
//! tied to that one process, and checks it before every lookup and `move_pages(2)` batch.
//! Where pidfds are not available (older kernels, `ENOSYS`) it falls back to the pid plus the
//! process's start time (`/proc/PID/stat` field 22), which a reused pid cannot share with the
//! process that held it before unless both started in the same clock tick.
//!
//! A pidfd cannot be passed to `move_pages(2)`, which takes a pid: between the check and the
//! call there is a window of one syscall, in which the process would have to exit and the pid
//! space wrap entirely. [`ProcessHandle::is_alive`] after the call tells whether that window
//! was crossed (the daemon counts it).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crate::read::proc::read_stat;
use crate::read::ReadError;
use crate::sys;

/// How a [`ProcessHandle`] recognises its process.
#[derive(Debug)]
enum Identity {
    /// A pidfd.
    Pidfd(OwnedFd),
    /// The start time in clock ticks since boot (no pidfd on this kernel).
    StartTime(u64),
}

/// One process, held from the refresh that read it until it exits.
#[derive(Debug)]
pub struct ProcessHandle {
    pid: u32,
    identity: Identity,
}

/// Why a process could not be held.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The process is gone (`ESRCH`), or exited while it was being read.
    #[error("pid {pid}: no such process")]
    Gone {
        /// The pid.
        pid: u32,
    },
    /// `pidfd_open(2)` failed for another reason (`EMFILE`, `ENOMEM`).
    #[error("pid {pid}: pidfd_open")]
    Pidfd {
        /// The pid.
        pid: u32,
        /// The OS error.
        source: std::io::Error,
    },
    /// Its `/proc/PID/stat` could not be read (the fallback identity).
    #[error("pid {pid}: reading its start time")]
    Stat {
        /// The pid.
        pid: u32,
        /// Why.
        source: Box<ReadError>,
    },
}

impl ProcessError {
    /// The OS error number behind it, when there is one (for counting by reason).
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        match self {
            ProcessError::Gone { .. } => Some(libc::ESRCH),
            ProcessError::Pidfd { source, .. } => source.raw_os_error(),
            ProcessError::Stat { source, .. } => match source.as_ref() {
                ReadError::Io { source, .. } => source.raw_os_error(),
                ReadError::Parse { .. } => None,
            },
        }
    }

    /// Whether the process simply went away (an expected race, counted, not raised).
    #[must_use]
    pub fn is_gone(&self) -> bool {
        match self {
            ProcessError::Gone { .. } => true,
            ProcessError::Pidfd { .. } => false,
            ProcessError::Stat { source, .. } => source.is_gone(),
        }
    }
}

/// Whether `proc_root` is this process's own `/proc` (its `self` is our pid): only then do
/// its pids name the processes a pidfd would open. A fixture tree is not.
#[must_use]
pub fn proc_is_ours(proc_root: &Path) -> bool {
    std::fs::read_link(proc_root.join("self"))
        .is_ok_and(|l| l.to_string_lossy().parse::<u32>() == Ok(std::process::id()))
}

impl ProcessHandle {
    /// Holds the process that has `pid` now: by pidfd when `proc_root` is our own `/proc`
    /// ([`proc_is_ours`], decided by the caller once), else by start time read there. Use
    /// [`ProcessHandle::is_alive`] after reading its `/proc` files: if it is still alive,
    /// what was read was this process's.
    ///
    /// # Errors
    /// [`ProcessError::Gone`] when there is no such process; the others when neither a
    /// pidfd nor the start time could be had.
    pub fn open(proc_root: &Path, pid: u32, by_pidfd: bool) -> Result<Self, ProcessError> {
        if !by_pidfd {
            return Self::by_start_time(proc_root, pid);
        }
        match sys::pidfd_open(pid) {
            Ok(fd) => Ok(ProcessHandle {
                pid,
                identity: Identity::Pidfd(fd),
            }),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(ProcessError::Gone { pid }),
            // No pidfd on this kernel (or seccomp forbids it): pid plus start time.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                Self::by_start_time(proc_root, pid)
            }
            Err(source) => Err(ProcessError::Pidfd { pid, source }),
        }
    }

    /// Holds the process by pid and start time only (what [`ProcessHandle::open`] falls
    /// back to without pidfds).
    ///
    /// # Errors
    /// As [`ProcessHandle::open`].
    pub fn by_start_time(proc_root: &Path, pid: u32) -> Result<Self, ProcessError> {
        let start = start_time(proc_root, pid)?;
        Ok(ProcessHandle {
            pid,
            identity: Identity::StartTime(start),
        })
    }

    /// The pid.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process this handle was opened on is still the one holding its pid.
    /// `proc_root` is read only for the start-time fallback.
    #[must_use]
    pub fn is_alive(&self, proc_root: &Path) -> bool {
        match &self.identity {
            // A poll that fails (ENOMEM) says nothing: assume exited, which only skips work.
            Identity::Pidfd(fd) => sys::pidfd_exited(fd.as_fd()).is_ok_and(|exited| !exited),
            Identity::StartTime(t) => start_time(proc_root, self.pid).is_ok_and(|now| now == *t),
        }
    }

    /// Whether this handle uses a pidfd (else the start-time fallback).
    #[must_use]
    pub fn has_pidfd(&self) -> bool {
        matches!(self.identity, Identity::Pidfd(_))
    }
}

fn start_time(proc_root: &Path, pid: u32) -> Result<u64, ProcessError> {
    match read_stat(proc_root, pid) {
        Ok(s) => Ok(s.start_ticks),
        Err(e) if e.is_gone() => Err(ProcessError::Gone { pid }),
        Err(e) => Err(ProcessError::Stat {
            pid,
            source: Box::new(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn child() -> std::process::Child {
        Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep")
    }

    #[test]
    fn a_handle_sees_its_process_exit_by_pidfd_and_by_start_time() {
        let proc_root = Path::new("/proc");
        let mut c = child();
        let pid = c.id();
        assert!(proc_is_ours(proc_root));
        let h = ProcessHandle::open(proc_root, pid, true).expect("open");
        assert!(h.has_pidfd());
        let t = ProcessHandle::by_start_time(proc_root, pid).expect("stat");
        assert!(h.is_alive(proc_root));
        assert!(t.is_alive(proc_root));
        c.kill().expect("kill");
        // Until reaped, a zombie still holds its pid: the pidfd already polls readable
        // (it signals exit, not reaping) and its start time is unchanged.
        c.wait().expect("wait");
        assert!(!h.is_alive(proc_root), "pidfd: exited");
        assert!(!t.is_alive(proc_root), "start time: the pid is free");
        assert!(matches!(
            ProcessHandle::open(proc_root, pid, true),
            Err(ProcessError::Gone { .. })
        ));
    }

    #[test]
    fn a_reused_pid_is_another_process() {
        // A fake /proc whose pid 42 started at tick 100, then is reused by a process
        // started at tick 250.
        let dir = tempfile::tempdir().expect("tempdir");
        let stat = |start: u64| {
            format!(
                "42 (x) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1000 10 \
                 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
            )
        };
        std::fs::create_dir_all(dir.path().join("42")).expect("mkdir");
        std::fs::write(dir.path().join("42/stat"), stat(100)).expect("write");
        assert!(!proc_is_ours(dir.path()));
        let h = ProcessHandle::open(dir.path(), 42, false).expect("held");
        assert!(!h.has_pidfd());
        assert!(h.is_alive(dir.path()));
        std::fs::write(dir.path().join("42/stat"), stat(250)).expect("write");
        assert!(!h.is_alive(dir.path()), "same pid, another start time");
        std::fs::remove_dir_all(dir.path().join("42")).expect("rm");
        assert!(!h.is_alive(dir.path()));
    }
}
