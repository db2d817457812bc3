//! The guest's root file system: a gzip-compressed newc cpio holding busybox-static, an
//! `/init`, the caller's `/lab/run.sh`, and any files the caller adds (static binaries,
//! data).
//!
//! `/init` (see [`INIT_SCRIPT`]) mounts proc, sysfs, devtmpfs, debugfs, tracefs and cgroup2, enables
//! the memory controller for child cgroups, sources [`LIB_SCRIPT`] (the file-export
//! helpers of [`crate::export`]) and runs `/lab/run.sh`, then prints
//! `TIERD-VM: END rc=<rc>` and powers off. Words `KEY=VALUE` on the kernel command line
//! reach `/init` (and so `run.sh`) as environment variables (init/main.c passes unknown
//! parameters with a `=` to init's environment).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;

use crate::cpio::{write_newc, Entry, EntryKind};
use crate::Error;

/// Where the busybox-static Debian package installs its binary.
pub const DEFAULT_BUSYBOX: &str = "/bin/busybox";

/// The guest's `/init`. It must not exit (the kernel panics when init exits), so it ends
/// in `poweroff -f`; `panic=-1` plus qemu's `-no-reboot` turn any panic into a qemu exit.
pub const INIT_SCRIPT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t debugfs debugfs /sys/kernel/debug || echo "TIERD-VM: warning: no debugfs"
# Where systemd mounts it on a host: tierd reads DAMON's regions from a tracefs instance.
mount -t tracefs tracefs /sys/kernel/tracing || echo "TIERD-VM: warning: no tracefs"
mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "TIERD-VM: warning: no cgroup2"
echo +memory > /sys/fs/cgroup/cgroup.subtree_control || echo "TIERD-VM: warning: memory controller not enabled"
mkdir -p /tmp
# 7.x kernels start DAMON_STAT's own kdamond at boot (CONFIG_DAMON_STAT_ENABLED_DEFAULT,
# mm/damon/stat.c); stop it, as DAMON's own tiering script does (damo's mem_tier.sh:
# `damo module stat write enabled N`), so every kdamond in a run is the mechanism's.
[ -w /sys/module/damon_stat/parameters/enabled ] && echo N > /sys/module/damon_stat/parameters/enabled
echo "TIERD-VM: START kernel=$(uname -r) uptime=$(cut -d' ' -f1 /proc/uptime)"
if [ -f /lab/run.sh ]; then
  sh -c '. /lab/lib.sh; . /lab/run.sh'
  rc=$?
else
  echo "TIERD-VM: no /lab/run.sh"
  rc=127
fi
echo "TIERD-VM: END rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)"
sync
poweroff -f
"#;

/// Shell helpers available to `run.sh` (it is sourced before it): they print files in the
/// framing that [`crate::export::decode_exports`] reads back on the host.
///
/// * `tierd_export FILE [NAME]`: one file (binary safe: base64).
/// * `tierd_export_tree DIR NAME`: a whole directory as a gzip'd tar (keeps symlinks and
///   empty files), exported as `NAME`.
///
/// The console log level is lowered while exporting so kernel messages cannot interleave
/// with the base64 lines (the byte count in the header would catch it anyway).
pub const LIB_SCRIPT: &str = r#"# tierd-vm guest helpers (sourced before /lab/run.sh)
tierd_export() {
  _f=$1; _n=${2:-$1}
  [ -f "$_f" ] || { echo "TIERD-VM: export: no file $_f"; return 1; }
  _lv=$(cut -f1 /proc/sys/kernel/printk)
  dmesg -n 1
  echo "TIERD-VM-FILE-BEGIN $(wc -c < "$_f") $_n"
  base64 "$_f" | sed 's/^/TIERD-VM-B64 /'
  echo "TIERD-VM-FILE-END $_n"
  dmesg -n "$_lv"
}
tierd_export_tree() {
  tar -C "$1" -czf /tmp/.tierd-tree.tgz . && tierd_export /tmp/.tierd-tree.tgz "$2"
  _r=$?
  rm -f /tmp/.tierd-tree.tgz
  return $_r
}
"#;

/// Builder for the initramfs archive. Entries are keyed by guest path, so adding a path
/// twice replaces the first; parent directories are created as needed.
#[derive(Debug, Clone, Default)]
pub struct Initramfs {
    entries: BTreeMap<String, Entry>,
}

/// Turns a guest path (`/bin/x` or `bin/x`) into an archive name, refusing `..`, empty
/// components and the root itself.
fn archive_name(guest: &str) -> Result<String, Error> {
    let trimmed = guest.trim_start_matches('/');
    let bad = |reason| Error::BadGuestPath {
        path: guest.to_owned(),
        reason,
    };
    if trimmed.is_empty() {
        return Err(bad("empty"));
    }
    for c in trimmed.split('/') {
        if c.is_empty() || c == "." || c == ".." {
            return Err(bad("empty, '.' or '..' component"));
        }
    }
    Ok(trimmed.to_owned())
}

impl Initramfs {
    /// An empty archive (no `/init`; the kernel would then panic).
    #[must_use]
    pub fn empty() -> Self {
        Self::default()
    }

    /// The standard harness root: directories, `dev/console` and `dev/null`, busybox
    /// (read from `busybox`), `/init`, `/lab/lib.sh` and `/lab/run.sh` = `run_script`.
    ///
    /// # Errors
    /// [`Error::Io`] when busybox cannot be read.
    pub fn standard(busybox: &Path, run_script: &str) -> Result<Self, Error> {
        let mut fs = Self::empty();
        for d in ["bin", "dev", "proc", "sys", "tmp", "lab", "root"] {
            fs.add_dir(d, 0o755)?;
        }
        fs.add_char_device("dev/console", 0o600, 5, 1)?;
        fs.add_char_device("dev/null", 0o666, 1, 3)?;
        fs.add_host_file(busybox, "bin/busybox", Some(0o755))?;
        fs.add_file("init", INIT_SCRIPT.as_bytes().to_vec(), 0o755)?;
        fs.add_file("lab/lib.sh", LIB_SCRIPT.as_bytes().to_vec(), 0o644)?;
        fs.add_file("lab/run.sh", run_script.as_bytes().to_vec(), 0o755)?;
        Ok(fs)
    }

    fn ensure_parents(&mut self, name: &str) {
        let mut at = 0;
        while let Some(i) = name[at..].find('/') {
            let dir = &name[..at + i];
            self.entries.entry(dir.to_owned()).or_insert_with(|| Entry {
                name: dir.to_owned(),
                perm: 0o755,
                kind: EntryKind::Dir,
            });
            at += i + 1;
        }
    }

    fn insert(&mut self, guest: &str, perm: u32, kind: EntryKind) -> Result<(), Error> {
        let name = archive_name(guest)?;
        self.ensure_parents(&name);
        self.entries
            .insert(name.clone(), Entry { name, perm, kind });
        Ok(())
    }

    /// Adds a directory.
    ///
    /// # Errors
    /// [`Error::BadGuestPath`] for an empty path or one with `..`.
    pub fn add_dir(&mut self, guest: &str, perm: u32) -> Result<(), Error> {
        self.insert(guest, perm, EntryKind::Dir)
    }

    /// Adds a regular file with the given contents.
    ///
    /// # Errors
    /// [`Error::BadGuestPath`] for an empty path or one with `..`.
    pub fn add_file(&mut self, guest: &str, contents: Vec<u8>, perm: u32) -> Result<(), Error> {
        self.insert(guest, perm, EntryKind::File(contents))
    }

    /// Adds a copy of a host file; `perm` defaults to the host file's permission bits.
    ///
    /// # Errors
    /// [`Error::Io`] when the host file cannot be read, [`Error::BadGuestPath`].
    pub fn add_host_file(
        &mut self,
        host: &Path,
        guest: &str,
        perm: Option<u32>,
    ) -> Result<(), Error> {
        let io = |source| Error::Io {
            path: host.to_path_buf(),
            source,
        };
        let data = std::fs::read(host).map_err(io)?;
        let perm = match perm {
            Some(p) => p,
            None => {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::metadata(host).map_err(io)?.permissions().mode() & 0o7777
            }
        };
        self.add_file(guest, data, perm)
    }

    /// Adds a symbolic link `guest` -> `target`.
    ///
    /// # Errors
    /// [`Error::BadGuestPath`].
    pub fn add_symlink(&mut self, guest: &str, target: &str) -> Result<(), Error> {
        self.insert(guest, 0o777, EntryKind::Symlink(target.to_owned()))
    }

    /// Adds a character device node.
    ///
    /// # Errors
    /// [`Error::BadGuestPath`].
    pub fn add_char_device(
        &mut self,
        guest: &str,
        perm: u32,
        major: u32,
        minor: u32,
    ) -> Result<(), Error> {
        self.insert(guest, perm, EntryKind::CharDev { major, minor })
    }

    /// Adds a host directory tree at the guest's root: its directories, regular files and
    /// symbolic links (targets kept as they are, so absolute ones resolve in the guest), with
    /// their permission bits. What the archive already holds at a path the tree also has is
    /// replaced, except a directory by a directory (which keeps its contents: a tree's `etc/`
    /// merges into one already there). A [`crate::rootfs`] tree has no `bin/`, so busybox's
    /// `/bin` stays whole.
    ///
    /// # Errors
    /// [`Error::Io`] when the tree cannot be read, [`Error::BadGuestPath`] for a name that is
    /// not UTF-8 or an entry that is not a directory, file or link (device, socket, FIFO).
    pub fn add_tree(&mut self, root: &Path) -> Result<(), Error> {
        use std::os::unix::fs::PermissionsExt as _;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        // Depth-first with sorted names, so the order (and the archive) is reproducible.
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let mut children: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(io(&dir))?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()
                .map_err(io(&dir))?;
            children.sort();
            for p in children.into_iter().rev() {
                let rel = p.strip_prefix(root).unwrap_or(&p);
                let guest = rel.to_str().ok_or_else(|| Error::BadGuestPath {
                    path: rel.to_string_lossy().into_owned(),
                    reason: "not UTF-8",
                })?;
                let meta = std::fs::symlink_metadata(&p).map_err(io(&p))?;
                let perm = meta.permissions().mode() & 0o7777;
                let ft = meta.file_type();
                if ft.is_symlink() {
                    let target = std::fs::read_link(&p).map_err(io(&p))?;
                    let target = target.to_str().ok_or_else(|| Error::BadGuestPath {
                        path: guest.to_owned(),
                        reason: "link target not UTF-8",
                    })?;
                    self.add_symlink(guest, target)?;
                } else if ft.is_dir() {
                    let name = archive_name(guest)?;
                    if !matches!(
                        self.entries.get(&name).map(|e| &e.kind),
                        Some(EntryKind::Dir)
                    ) {
                        self.add_dir(guest, perm)?;
                    }
                    stack.push(p);
                } else if ft.is_file() {
                    self.add_host_file(&p, guest, Some(perm))?;
                } else {
                    return Err(Error::BadGuestPath {
                        path: guest.to_owned(),
                        reason: "not a directory, regular file or symbolic link",
                    });
                }
            }
        }
        Ok(())
    }

    /// The entries in archive order (sorted by path, so parents precede children).
    #[must_use]
    pub fn entries(&self) -> Vec<&Entry> {
        self.entries.values().collect()
    }

    /// The uncompressed newc archive.
    ///
    /// # Errors
    /// [`Error::Cpio`] when an entry does not fit the format.
    pub fn to_cpio(&self) -> Result<Vec<u8>, Error> {
        let list: Vec<Entry> = self.entries.values().cloned().collect();
        write_newc(&list)
    }

    /// The gzip-compressed archive (the kernel's initramfs decompressors include gzip).
    ///
    /// # Errors
    /// [`Error::Cpio`].
    pub fn to_cpio_gz(&self) -> Result<Vec<u8>, Error> {
        let raw = self.to_cpio()?;
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        // Writing into a Vec cannot fail.
        enc.write_all(&raw)
            .and_then(|()| enc.finish())
            .map_err(|e| Error::Cpio(format!("gzip: {e}")))
    }

    /// Writes the gzip'd archive to `path` and returns the path.
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Cpio`].
    pub fn write_gz(&self, path: &Path) -> Result<PathBuf, Error> {
        let gz = self.to_cpio_gz()?;
        std::fs::write(path, gz).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(path.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::{parse_newc, S_IFCHR, S_IFDIR, S_IFREG};

    #[test]
    fn standard_root_has_console_init_and_parents() {
        let dir = std::env::temp_dir().join(format!("tierd-vm-initramfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let fake_bb = dir.join("busybox");
        std::fs::write(&fake_bb, b"\x7fELF fake").expect("write");
        let mut fs = Initramfs::standard(&fake_bb, "echo hi\n").expect("build");
        fs.add_file("/opt/tools/x", b"data".to_vec(), 0o644)
            .expect("add");
        let gz = fs.to_cpio_gz().expect("gz");
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw)
            .expect("gunzip");
        let parsed = parse_newc(&raw).expect("parse");
        let get = |n: &str| {
            parsed
                .iter()
                .find(|p| p.name == n)
                .unwrap_or_else(|| panic!("no {n}"))
        };
        let console = get("dev/console");
        assert_eq!(console.mode & 0o170_000, S_IFCHR);
        assert_eq!((console.rdev_major, console.rdev_minor), (5, 1));
        assert_eq!(get("init").mode, S_IFREG | 0o755);
        assert_eq!(get("init").data, INIT_SCRIPT.as_bytes());
        assert_eq!(get("lab/run.sh").data, b"echo hi\n");
        assert_eq!(get("bin/busybox").data, b"\x7fELF fake");
        assert_eq!(get("opt").mode, S_IFDIR | 0o755);
        assert_eq!(get("opt/tools/x").data, b"data");
        // parents precede children
        let pos = |n: &str| parsed.iter().position(|p| p.name == n).expect("present");
        assert!(pos("opt") < pos("opt/tools") && pos("opt/tools") < pos("opt/tools/x"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_host_tree_adds_files_links_and_merges_directories() {
        use std::os::unix::fs::symlink;
        let dir = std::env::temp_dir().join(format!("tierd-vm-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("usr/lib/x86_64-linux-gnu")).expect("mkdir");
        std::fs::create_dir_all(dir.join("lab")).expect("mkdir");
        std::fs::write(dir.join("usr/lib/x86_64-linux-gnu/libc.so.6"), b"libc").expect("w");
        std::fs::write(dir.join("lab/extra"), b"x").expect("w");
        symlink("usr/lib", dir.join("lib")).expect("link");
        symlink(
            "/lib/x86_64-linux-gnu/libc.so.6",
            dir.join("usr/lib/x86_64-linux-gnu/abs"),
        )
        .expect("link");
        let bb = dir.join("busybox");
        std::fs::write(&bb, b"bb").expect("w");
        let mut fs = Initramfs::standard(&bb, "true\n").expect("standard");
        std::fs::remove_file(&bb).expect("rm");
        fs.add_tree(&dir).expect("tree");
        let raw = fs.to_cpio().expect("cpio");
        let parsed = parse_newc(&raw).expect("parse");
        let get = |n: &str| parsed.iter().find(|p| p.name == n);
        assert_eq!(
            get("usr/lib/x86_64-linux-gnu/libc.so.6").expect("lib").data,
            b"libc"
        );
        let lib = get("lib").expect("link");
        assert_eq!(lib.mode & 0o170_000, crate::cpio::S_IFLNK);
        assert_eq!(lib.data, b"usr/lib");
        assert_eq!(
            get("usr/lib/x86_64-linux-gnu/abs").expect("abs link").data,
            b"/lib/x86_64-linux-gnu/libc.so.6"
        );
        // The existing /lab keeps run.sh; the tree's file joins it; busybox is untouched.
        assert_eq!(get("lab/run.sh").expect("run.sh").data, b"true\n");
        assert_eq!(get("lab/extra").expect("extra").data, b"x");
        assert_eq!(get("bin/busybox").expect("busybox").data, b"bb");
        assert!(matches!(
            fs.add_tree(&dir.join("nonexistent")),
            Err(Error::Io { .. })
        ));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn bad_guest_paths_are_typed_errors() {
        let mut fs = Initramfs::empty();
        assert!(matches!(
            fs.add_dir("/", 0o755),
            Err(Error::BadGuestPath { .. })
        ));
        assert!(matches!(
            fs.add_file("a/../b", vec![], 0o644),
            Err(Error::BadGuestPath { .. })
        ));
        assert!(matches!(
            fs.add_file("a//b", vec![], 0o644),
            Err(Error::BadGuestPath { .. })
        ));
        assert!(matches!(
            fs.add_host_file(Path::new("/nonexistent/tierd"), "x", None),
            Err(Error::Io { .. })
        ));
    }
}
