//! Output files written atomically: every file the `tierd` command writes (`--json`, `--csv`,
//! `--plot`, `--report`, the lab's outputs) goes through [`write_atomic`].
//!
//! The bytes go to a temporary file in the target's directory (so that the rename stays on
//! one filesystem), which is flushed to the disk (`fsync`) and then renamed over the target.
//! `rename(2)` replaces the directory entry in one step: a reader sees the old file or the
//! new one, never a prefix. When anything fails (a full disk, an unwritable directory, a
//! signal that ends the write with an error), the temporary file is removed and the old
//! target is left as it was. Only a process killed outright (SIGKILL, power loss) between
//! the create and the rename can leave a `.NAME.*.tmp` beside the target, never a truncated
//! target.
//!
//! Targets that are not regular files (`/dev/null`, `/dev/stdout`, a FIFO) cannot be replaced
//! by a rename (and must not be: replacing `/dev/null` as root would break the host), so
//! they are written in place.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// An output file that could not be written. The message is one line naming the path.
#[derive(Debug, Error)]
#[error("cannot write {path}: {source}")]
pub struct OutputError {
    /// The target the caller asked for.
    pub path: PathBuf,
    /// Why (`ENOSPC`, `EACCES`, ...).
    #[source]
    pub source: io::Error,
}

impl OutputError {
    /// Whether the disk (or the quota) was full.
    #[must_use]
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self.source.raw_os_error(),
            Some(libc_errno::ENOSPC | libc_errno::EDQUOT)
        )
    }
}

/// The two errno values [`OutputError::is_disk_full`] looks for (include/uapi/asm-generic/
/// errno-base.h and errno.h), spelt here rather than adding libc to a plotting crate.
mod libc_errno {
    pub const ENOSPC: i32 = 28;
    pub const EDQUOT: i32 = 122;
}

/// Writes `bytes` to `path` atomically (see the module documentation).
///
/// A new file gets the permissions `File::create` would give it (0666 less the umask); a
/// replaced file keeps its permission bits.
///
/// # Errors
/// [`OutputError`] naming `path` when the directory cannot be written, the disk is full, or
/// the rename fails; the old target is then unchanged and no temporary file is left.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    write_atomic_via(path, bytes, |f| Box::new(f))
}

/// [`write_atomic`] with the temporary file's writer wrapped by `wrap`: the seam through
/// which tests make the write fail part way (ENOSPC after N bytes).
fn write_atomic_via(
    path: &Path,
    bytes: &[u8],
    wrap: impl for<'a> FnOnce(&'a File) -> Box<dyn Write + 'a>,
) -> Result<(), OutputError> {
    let err = |source| OutputError {
        path: path.to_path_buf(),
        source,
    };
    // Follow a symlink to the file it names, as fs::write would; metadata() follows links.
    let existing = std::fs::metadata(path).ok();
    if let Some(m) = &existing {
        if !m.is_file() {
            return write_in_place(path, bytes, wrap).map_err(err);
        }
    }
    let target = match &existing {
        Some(_) => std::fs::canonicalize(path).map_err(err)?,
        None => path.to_path_buf(),
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let tmp = create_temp(&dir, &name).map_err(err)?;
    if let Some(m) = &existing {
        tmp.as_file()
            .set_permissions(Permissions::from_mode(m.permissions().mode() & 0o7777))
            .map_err(err)?;
    }
    {
        let mut w = wrap(tmp.as_file());
        w.write_all(bytes).and_then(|()| w.flush()).map_err(err)?;
    }
    // The data must be on the disk before the name points at it, or a crash after the rename
    // could leave an empty file under the target's name (ext4 data=ordered aside).
    tmp.as_file().sync_all().map_err(err)?;
    // On failure the PersistError owns the temporary file and removes it when dropped.
    tmp.persist(&target).map_err(|e| err(e.error))?;
    // Make the rename itself durable. The new file is complete and in place either way: a
    // directory that refuses fsync (some network filesystems) is not worth failing for.
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A new temporary file `.NAME.PID.N.tmp` in `dir`, removed when dropped unless persisted.
///
/// Created here rather than with `tempfile::Builder::tempfile_in`, whose errors name the
/// temporary file (`No such file or directory (os error 2) at path "/d/.x.json.Ab12.tmp"`), a
/// name the user never gave, and carry no errno ([`OutputError::is_disk_full`] needs it).
/// The name is unique within the process by a counter, and against a file a killed process
/// with the same pid left by `O_EXCL`: such a name is skipped.
fn create_temp(dir: &Path, name: &str) -> io::Result<tempfile::NamedTempFile> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            // Masked by the umask at open(2), exactly like File::create's 0666.
            .mode(0o666)
            .open(&path);
        match file {
            Ok(f) => {
                // From here the file is removed when dropped; if even that cannot be set up
                // (no current directory to resolve a relative one), it is removed now.
                return match tempfile::TempPath::try_from_path(&path) {
                    Ok(p) => Ok(tempfile::NamedTempFile::from_parts(f, p)),
                    Err(e) => {
                        let _ = std::fs::remove_file(&path);
                        Err(e)
                    }
                };
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes to a target that is not a regular file (a device or a FIFO), where no rename is
/// possible.
fn write_in_place(
    path: &Path,
    bytes: &[u8],
    wrap: impl for<'a> FnOnce(&'a File) -> Box<dyn Write + 'a>,
) -> io::Result<()> {
    let f = OpenOptions::new().write(true).open(path)?;
    let mut w = wrap(&f);
    w.write_all(bytes)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that accepts `left` bytes and then fails as a full disk does.
    struct FullAfter<W> {
        inner: W,
        left: usize,
    }

    impl<W: Write> Write for FullAfter<W> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::from_raw_os_error(libc_errno::ENOSPC));
            }
            let n = buf.len().min(self.left);
            let n = self.inner.write(&buf[..n])?;
            self.left -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_new_and_replaces_old_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.json");
        write_atomic(&p, b"first\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"first\n");
        write_atomic(&p, b"second, longer\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second, longer\n");
        assert_eq!(entries(d.path()), ["out.json"], "no temporary file left");
    }

    #[test]
    fn disk_full_part_way_leaves_the_old_file_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.html");
        std::fs::write(&p, b"old report").unwrap();
        let big = vec![b'x'; 100_000];
        let e = write_atomic_via(&p, &big, |f| {
            Box::new(FullAfter {
                inner: f,
                left: 4096,
            })
        })
        .unwrap_err();
        assert!(e.is_disk_full(), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&p.display().to_string()), "{msg}");
        assert!(msg.contains("No space left on device"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert_eq!(std::fs::read(&p).unwrap(), b"old report");
        assert_eq!(entries(d.path()), ["report.html"]);
    }

    #[test]
    fn disk_full_on_a_new_target_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("new.csv");
        let e = write_atomic_via(&p, b"0123456789", |f| {
            Box::new(FullAfter { inner: f, left: 3 })
        })
        .unwrap_err();
        assert!(e.is_disk_full());
        assert!(entries(d.path()).is_empty(), "{:?}", entries(d.path()));
    }

    #[test]
    fn replaced_file_keeps_its_mode_and_a_symlink_is_followed() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real.svg");
        std::fs::write(&real, b"old").unwrap();
        std::fs::set_permissions(&real, Permissions::from_mode(0o640)).unwrap();
        let link = d.path().join("link.svg");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[test]
    fn devices_are_written_in_place() {
        use std::os::unix::fs::FileTypeExt;
        // /dev/null is a character device: renaming over it would need (and abuse) root.
        write_atomic(Path::new("/dev/null"), b"discarded").unwrap();
        let t = std::fs::metadata("/dev/null").unwrap().file_type();
        assert!(t.is_char_device());
    }

    #[test]
    fn missing_directory_names_the_path() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("no/such/dir/out.json");
        let e = write_atomic(&p, b"x").unwrap_err();
        // The path asked for and the OS error, not the temporary file's name.
        assert_eq!(
            e.to_string(),
            format!(
                "cannot write {}: {}",
                p.display(),
                io::Error::from_raw_os_error(2)
            )
        );
        assert_eq!(e.source.raw_os_error(), Some(2), "ENOENT");
    }
}
