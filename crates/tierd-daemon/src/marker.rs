//! The marker tierd leaves while its kdamond runs, so that a restart after an unclean exit
//! (SIGKILL, OOM kill, a stop timeout) recognises the kdamond as its own.
//!
//! DAMON's sysfs interface has no owner field: a kdamond is just `kdamonds/0`. tierd refuses
//! to touch a kdamond it did not start (another tool's monitoring), so without a marker a
//! tierd killed with its kdamond on would refuse that kdamond on restart, for ever. The
//! marker (`<state_dir>/damon.json`, by default under `/run`, a tmpfs that a reboot empties)
//! names the kdamond by its thread id while it runs, with the boot it belongs to, tierd's
//! pid and what `nr_kdamonds` was before tierd claimed one. On start, a marker of this boot
//! whose tierd is gone lets [`tierd_linux::source::damon::DamonMonitor::take_over`] stop that
//! kdamond and configure it afresh; a kdamond with another thread id is still refused.
//!
//! It is written atomically (a temporary file renamed over it), so a crash mid-write leaves
//! the old marker or the new one, never half of one.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tierd_linux::read::proc::read_status;
use tierd_linux::source::damon::LeftBehind;

/// The marker file's name under the state directory.
pub const MARKER_FILE: &str = "damon.json";

/// The marker's format version.
const VERSION: u32 = 1;

/// What the marker holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct MarkerFile {
    version: u32,
    /// `/proc/sys/kernel/random/boot_id` when written: a marker of another boot is stale.
    boot_id: String,
    /// The tierd that wrote it.
    tierd_pid: u32,
    /// `kdamonds/0/pid` when tierd last turned it on.
    kdamond_pid: u32,
    /// `nr_kdamonds` before tierd claimed kdamond 0.
    prev_nr_kdamonds: u64,
}

/// Why the marker could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    /// The state directory or the marker could not be written or removed.
    #[error("{op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Why a marker found at start is not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stale {
    /// No marker: the previous tierd stopped cleanly, or there was none.
    Absent,
    /// Unreadable or of another format version.
    Unreadable(String),
    /// Written in another boot.
    OtherBoot,
    /// Its tierd is still running: another instance, whose kdamond this one must not touch.
    Running(u32),
}

/// The marker of one state directory.
#[derive(Clone, Debug)]
pub struct Marker {
    dir: PathBuf,
    proc_root: PathBuf,
}

fn boot_id(proc_root: &Path) -> String {
    std::fs::read_to_string(proc_root.join("sys/kernel/random/boot_id"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Marker {
    /// The marker under `dir`, checked against `proc_root`.
    #[must_use]
    pub fn new(dir: &Path, proc_root: &Path) -> Self {
        Marker {
            dir: dir.to_path_buf(),
            proc_root: proc_root.to_path_buf(),
        }
    }

    /// The marker's path.
    #[must_use]
    pub fn path(&self) -> PathBuf {
        self.dir.join(MARKER_FILE)
    }

    /// What a previous tierd of this boot left behind, if it is gone; else why not.
    ///
    /// # Errors
    /// [`Stale`] says why the marker does not apply.
    pub fn left_behind(&self) -> Result<LeftBehind, Stale> {
        let text = match std::fs::read_to_string(self.path()) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Stale::Absent),
            Err(e) => return Err(Stale::Unreadable(e.to_string())),
        };
        let m: MarkerFile =
            serde_json::from_str(&text).map_err(|e| Stale::Unreadable(e.to_string()))?;
        if m.version != VERSION {
            return Err(Stale::Unreadable(format!("version {}", m.version)));
        }
        if m.boot_id != boot_id(&self.proc_root) {
            return Err(Stale::OtherBoot);
        }
        // A live process with that pid that is a tierd (not us): another instance.
        let me = std::process::id();
        if m.tierd_pid != me
            && read_status(&self.proc_root, m.tierd_pid).is_ok_and(|s| s.name == "tierd")
        {
            return Err(Stale::Running(m.tierd_pid));
        }
        Ok(LeftBehind {
            kdamond_pid: m.kdamond_pid,
            prev_nr_kdamonds: m.prev_nr_kdamonds,
        })
    }

    /// Records the running kdamond (atomically: written aside, then renamed).
    ///
    /// # Errors
    /// [`MarkerError::Io`] naming the file.
    pub fn write(&self, left: LeftBehind) -> Result<(), MarkerError> {
        let io = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| MarkerError::Io { op, path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(io("creating", &self.dir))?;
        let m = MarkerFile {
            version: VERSION,
            boot_id: boot_id(&self.proc_root),
            tierd_pid: std::process::id(),
            kdamond_pid: left.kdamond_pid,
            prev_nr_kdamonds: left.prev_nr_kdamonds,
        };
        let text = serde_json::to_string(&m).unwrap_or_default();
        let path = self.path();
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)
            .map_err(io("creating a file in", &self.dir))?;
        tmp.write_all(text.as_bytes())
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(io("writing", tmp.path()))?;
        tmp.persist(&path).map_err(|e| MarkerError::Io {
            op: "renaming over",
            path: path.clone(),
            source: e.error,
        })?;
        Ok(())
    }

    /// Removes the marker (the kdamond was handed back). Absent is fine.
    ///
    /// # Errors
    /// [`MarkerError::Io`] naming the file.
    pub fn remove(&self) -> Result<(), MarkerError> {
        match std::fs::remove_file(self.path()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(MarkerError::Io {
                op: "removing",
                path: self.path(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_with_boot(id: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(d.path().join("sys/kernel/random")).expect("mkdir");
        std::fs::write(
            d.path().join("sys/kernel/random/boot_id"),
            format!("{id}\n"),
        )
        .expect("write");
        d
    }

    #[test]
    fn a_marker_round_trips_and_is_stale_in_another_boot() {
        let proc_ = proc_with_boot("b1");
        let state = tempfile::tempdir().expect("tempdir");
        let m = Marker::new(&state.path().join("tierd"), proc_.path());
        assert_eq!(m.left_behind(), Err(Stale::Absent));
        let lb = LeftBehind {
            kdamond_pid: 321,
            prev_nr_kdamonds: 0,
        };
        m.write(lb).expect("write");
        // Written by this very process: not "another running tierd".
        assert_eq!(m.left_behind(), Ok(lb));
        // No temporary file is left beside it.
        let names: Vec<_> = std::fs::read_dir(state.path().join("tierd"))
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(MARKER_FILE)]);
        std::fs::write(proc_.path().join("sys/kernel/random/boot_id"), "b2\n").expect("write");
        assert_eq!(m.left_behind(), Err(Stale::OtherBoot));
        m.remove().expect("remove");
        m.remove().expect("idempotent");
        assert_eq!(m.left_behind(), Err(Stale::Absent));
    }

    #[test]
    fn a_marker_of_a_running_tierd_or_garbage_is_not_used() {
        let proc_ = proc_with_boot("b1");
        let state = tempfile::tempdir().expect("tempdir");
        let m = Marker::new(state.path(), proc_.path());
        // pid 77 is alive in this fake /proc and its comm is tierd.
        std::fs::create_dir_all(proc_.path().join("77")).expect("mkdir");
        std::fs::write(
            proc_.path().join("77/status"),
            "Name:\ttierd\nTgid:\t77\nCpus_allowed_list:\t0\nMems_allowed_list:\t0\n",
        )
        .expect("write");
        std::fs::write(
            m.path(),
            r#"{"version":1,"boot_id":"b1","tierd_pid":77,"kdamond_pid":5,"prev_nr_kdamonds":0}"#,
        )
        .expect("write");
        assert_eq!(m.left_behind(), Err(Stale::Running(77)));
        std::fs::write(m.path(), "{not json").expect("write");
        assert!(matches!(m.left_behind(), Err(Stale::Unreadable(_))));
        std::fs::write(
            m.path(),
            r#"{"version":9,"boot_id":"b1","tierd_pid":1,"kdamond_pid":5,"prev_nr_kdamonds":0}"#,
        )
        .expect("write");
        assert!(matches!(m.left_behind(), Err(Stale::Unreadable(_))));
    }
}
