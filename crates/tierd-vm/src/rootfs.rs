//! A Debian userland for the guest: real servers (memcached, redis-server) and numactl with
//! their shared libraries, unpacked from Debian's packages into a directory that
//! [`crate::Initramfs::add_tree`] puts into the guest beside busybox.
//!
//! The packages come from Debian bookworm (the host's suite) through a private apt
//! configuration like the kernel's ([`crate::kernel`]): our own source list signed-by the
//! Debian archive keyring, so apt checks the Release signature and every package's hash
//! against the signed index; the system's sources and state are left untouched.
//!
//! Why bookworm and not trixie: the only reason to prefer trixie would be a numactl that sets
//! `MPOL_F_NUMA_BALANCING` with `--preferred-many`, and neither does: with
//! `numactl -b --preferred-many=0 CMD`, strace shows a plain `set_mempolicy(MPOL_PREFERRED_MANY,
//! ...)` from both bookworm's 2.0.16 and trixie's 2.0.19 (`--balancing` applies to `--membind`
//! only: `MPOL_BIND|MPOL_F_NUMA_BALANCING`). The lab sets that flag with its own launcher.
//!
//! The set of packages is the Depends/Pre-Depends closure of the requested ones (as
//! `apt-cache depends --recurse` prints it), less what the guest needs no part of to run the
//! binaries ([`SKIPPED`]: maintainer-script and init-system tooling such as perl, debconf,
//! adduser). Each package is unpacked with `dpkg -x` into one tree; the tree is then
//! usr-merged (`/lib` and `/lib64` become links into `/usr`, as on a Debian 12 system, so the
//! ELF interpreter `/lib64/ld-linux-x86-64.so.2` resolves whichever half a package used),
//! stripped of documentation, locales and iconv modules, given an `/etc/passwd` (memcached
//! refuses to run as root without `-u`, and `-u root` needs `getpwnam("root")`), and checked:
//! every ELF file of [`CHECKED_BINARIES`] must find its interpreter and, transitively, every
//! `DT_NEEDED` library inside the tree.
//!
//! Cache layout under the cache directory: `rootfs/apt/` (private apt state),
//! `rootfs/<packages>-<hash>/tree` (the tree; the hash covers the closure's names and
//! versions), `packages.txt` beside it, and `rootfs/<packages>.env` naming the current one, so a
//! later fetch needs no network (as `kernel.env` does for the kernel).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::kernel::{archive_uri, io, run};
use crate::Error;

/// The apt suite the packages come from.
pub const SUITE: &str = "bookworm";

/// The packages the lab's real-server experiments need.
pub const SERVER_PACKAGES: &[&str] = &["memcached", "redis-server", "numactl"];

/// Packages of the closure the guest does not need to run the binaries: maintainer-script
/// interpreters and tools (perl, debconf, adduser, passwd, dpkg, install-info), init-system
/// integration (systemd, init-system-helpers, lsb-base, sysvinit-utils) and the usrmerge
/// transition (the tree is merged here). A dependency group one of whose alternatives is
/// listed here is dropped whole. If this list ever drops a shared library a binary needs, the
/// `DT_NEEDED` check fails and names it.
pub const SKIPPED: &[&str] = &[
    "adduser",
    "debconf",
    "cdebconf",
    "dpkg",
    "init-system-helpers",
    "install-info",
    "lsb-base",
    "passwd",
    "perl",
    "perl-base",
    "systemd",
    "sysvinit-utils",
    "usr-is-merged",
    "usrmerge",
];

/// Guest paths (relative to the tree) whose ELF dependencies are checked.
pub const CHECKED_BINARIES: &[&str] = &[
    "usr/bin/memcached",
    "usr/bin/redis-server",
    "usr/bin/numactl",
    "usr/bin/migratepages",
];

/// Where the dynamic linker looks (Debian's multiarch directories; after the usr-merge,
/// `lib/...` are the same directories).
const LIB_DIRS: &[&str] = &["usr/lib/x86_64-linux-gnu", "usr/lib", "usr/lib64"];

/// Paths removed from the tree: nothing the binaries read, and the initramfs is unpacked into
/// the guest's RAM (on the fast node, which the experiments fill on purpose).
const PRUNED: &[&str] = &[
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/bug",
    "usr/lib/x86_64-linux-gnu/gconv",
];

/// What can be wrong with the package set or the tree.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    /// A requested package (or a dependency) is in no index of the private apt.
    #[error("package {0:?} is not in Debian {SUITE}'s index")]
    NoPackage(String),
    /// `apt-cache show` gave no version for a package of the closure.
    #[error("no version for package {0:?} in `apt-cache show`")]
    NoVersion(String),
    /// A checked binary is not in the tree.
    #[error("{0}: not in the unpacked packages")]
    MissingBinary(String),
    /// A binary's interpreter or a `DT_NEEDED` library is in no package of the closure.
    #[error("{binary} needs {library}, which is not in the unpacked packages")]
    MissingLibrary {
        /// The binary (or library) that needs it.
        binary: String,
        /// The library (or interpreter path).
        library: String,
    },
    /// A file that should be an ELF object is not one this parser reads.
    #[error("{path}: not a 64-bit little-endian ELF file the check can read: {reason}")]
    BadElf {
        /// The file, relative to the tree.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Two packages put different things at one path when `/lib` was merged into `/usr/lib`.
    #[error("usr-merge conflict at {0}: both /{0} and /usr/{0} exist")]
    MergeConflict(String),
    /// A symbolic link in the tree does not end (more than 40 links).
    #[error("too many levels of symbolic links at {0}")]
    SymlinkLoop(String),
}

/// A package of the closure and the version unpacked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Package {
    /// Debian package name.
    pub name: String,
    /// Debian version.
    pub version: String,
}

/// An unpacked, checked tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rootfs {
    /// The tree (`usr/bin/memcached`, ...); the guest's `/` after `add_tree`.
    pub dir: PathBuf,
    /// Every package unpacked into it, by name.
    pub packages: Vec<Package>,
}

/// One dependency as `apt-cache depends` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    /// The package name, without an architecture qualifier (`perl:any` -> `perl`).
    pub name: String,
    /// `<name>` in the output: a virtual package, satisfied by one of `providers`.
    pub virtual_pkg: bool,
    /// The packages listed under it (providers).
    pub providers: Vec<String>,
}

/// Per package: its dependency groups (each group: alternatives, any one satisfies it).
pub type DepGraph = BTreeMap<String, Vec<Vec<Dep>>>;

fn strip_arch(name: &str) -> &str {
    name.split(':').next().unwrap_or(name)
}

/// Parses `apt-cache depends --recurse ...` output. Package lines start at column 0 (`<x>` for
/// a virtual package); `  Depends: x` / `  PreDepends: x` follow, ` |Depends: x` meaning "x, or
/// the next one"; lines indented by four list the providers of the dependency above.
#[must_use]
pub fn parse_depends(text: &str) -> DepGraph {
    let mut graph = DepGraph::new();
    let mut current: Option<String> = None;
    // The previous dependency line ended with `|`: the next one joins its group.
    let mut or_next = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            let name = line.trim();
            if name.starts_with('<') {
                // A virtual package's own entry: nothing to install for it.
                current = None;
            } else {
                let name = strip_arch(name).to_owned();
                graph.entry(name.clone()).or_default();
                current = Some(name);
            }
            or_next = false;
            continue;
        }
        let Some(pkg) = current.as_ref() else {
            continue;
        };
        let groups = graph.entry(pkg.clone()).or_default();
        if line.starts_with("    ") {
            if let Some(dep) = groups.last_mut().and_then(|g| g.last_mut()) {
                dep.providers.push(strip_arch(line.trim()).to_owned());
            }
            continue;
        }
        let t = line.trim_start();
        let (alt, t) = match t.strip_prefix('|') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let Some((kind, target)) = t.split_once(':') else {
            continue;
        };
        if kind != "Depends" && kind != "PreDepends" {
            continue;
        }
        let target = target.trim();
        let (virtual_pkg, name) = match target.strip_prefix('<').and_then(|x| x.strip_suffix('>')) {
            Some(v) => (true, v),
            None => (false, target),
        };
        let dep = Dep {
            name: strip_arch(name).to_owned(),
            virtual_pkg,
            providers: Vec::new(),
        };
        match groups.last_mut() {
            Some(g) if or_next => g.push(dep),
            _ => groups.push(vec![dep]),
        }
        or_next = alt;
    }
    graph
}

/// The packages to unpack: `roots` and, transitively, one package per dependency group, less
/// [`SKIPPED`]-style names in `skip` (a group with a skipped alternative is dropped whole: the
/// skipped package is what satisfies it). Within a group the first alternative that is a real
/// package wins; a virtual one is satisfied by its first provider.
///
/// # Errors
/// [`RootfsError::NoPackage`] when a root or a dependency has no real package in the graph.
pub fn closure(
    graph: &DepGraph,
    roots: &[&str],
    skip: &[&str],
) -> Result<BTreeSet<String>, RootfsError> {
    let skipped = |n: &str| skip.contains(&n);
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<String> = VecDeque::new();
    for r in roots {
        if !graph.contains_key(*r) {
            return Err(RootfsError::NoPackage((*r).to_owned()));
        }
        queue.push_back((*r).to_owned());
    }
    while let Some(p) = queue.pop_front() {
        if !seen.insert(p.clone()) {
            continue;
        }
        for group in graph.get(&p).map_or(&[][..], Vec::as_slice) {
            if group.iter().any(|d| skipped(&d.name)) {
                continue;
            }
            let pick = group.iter().find_map(|d| {
                if !d.virtual_pkg && graph.contains_key(&d.name) {
                    Some(d.name.clone())
                } else {
                    d.providers
                        .iter()
                        .find(|x| graph.contains_key(*x) && !skipped(x))
                        .cloned()
                }
            });
            match pick {
                Some(x) => queue.push_back(x),
                None => {
                    return Err(RootfsError::NoPackage(
                        group.first().map(|d| d.name.clone()).unwrap_or_default(),
                    ))
                }
            }
        }
    }
    Ok(seen)
}

/// `Package:` and `Version:` of each stanza of `apt-cache show --no-all-versions`.
#[must_use]
pub fn parse_versions(show: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stanza in show.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        if let (Some(p), Some(v)) = (field("Package:"), field("Version:")) {
            out.entry(p.to_owned()).or_insert_with(|| v.to_owned());
        }
    }
    out
}

/// FNV-1a, 64 bits: a stable key for the cache directory (std's hasher may change between
/// Rust releases).
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The cache directory name of a package set: the requested names and a hash of the
/// closure's names and versions.
#[must_use]
pub fn cache_key(roots: &[&str], packages: &[Package]) -> String {
    let mut text = roots.join("+");
    for p in packages {
        text.push_str(&format!("\n{}={}", p.name, p.version));
    }
    format!("{}-{:016x}", roots.join("+"), fnv1a(text.as_bytes()))
}

/// What the dynamic linker needs of an ELF file: its interpreter (`PT_INTERP`) and its
/// `DT_NEEDED` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElfDeps {
    /// `PT_INTERP`, for executables.
    pub interp: Option<String>,
    /// `DT_NEEDED` entries, in order.
    pub needed: Vec<String>,
}

/// Reads [`ElfDeps`] from a 64-bit little-endian ELF file (the layout of
/// /usr/include/elf.h: `Elf64_Ehdr`, `Elf64_Phdr`, `Elf64_Dyn`). The string table of the
/// dynamic section is found through `DT_STRTAB`, a virtual address mapped to a file offset by
/// the `PT_LOAD` segment that contains it. A file without `PT_DYNAMIC` (static) has no needs.
///
/// # Errors
/// A reason when the file is not such an ELF file or a table lies outside it.
pub fn elf_deps(b: &[u8]) -> Result<ElfDeps, String> {
    let u16_at = |at: usize| -> Result<u64, String> {
        b.get(at..at + 2)
            .map(|s| u64::from(u16::from_le_bytes([s[0], s[1]])))
            .ok_or_else(|| format!("truncated at {at:#x}"))
    };
    let u32_at = |at: usize| -> Result<u64, String> {
        b.get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .map(|a| u64::from(u32::from_le_bytes(a)))
            .ok_or_else(|| format!("truncated at {at:#x}"))
    };
    let u64_at = |at: usize| -> Result<u64, String> {
        b.get(at..at + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| format!("truncated at {at:#x}"))
    };
    let us = |v: u64| usize::try_from(v).map_err(|_| format!("offset {v:#x} too large"));
    if b.get(..4) != Some(b"\x7fELF") {
        return Err("no ELF magic".into());
    }
    if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err("not ELFCLASS64/ELFDATA2LSB".into());
    }
    let phoff = us(u64_at(0x20)?)?;
    let phentsize = us(u16_at(0x36)?)?;
    let phnum = us(u16_at(0x38)?)?;
    if phentsize < 56 {
        return Err(format!("e_phentsize {phentsize} < 56"));
    }
    // (vaddr, offset, filesz) of the PT_LOAD segments; PT_DYNAMIC's (offset, size).
    let mut loads = Vec::new();
    let mut dynamic = None;
    let mut deps = ElfDeps::default();
    let cstr = |at: usize| -> Result<String, String> {
        let rest = b
            .get(at..)
            .ok_or_else(|| format!("string at {at:#x} beyond the file"))?;
        let end = rest
            .iter()
            .position(|c| *c == 0)
            .ok_or_else(|| format!("unterminated string at {at:#x}"))?;
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let (kind, off, vaddr, filesz) = (
            u32_at(ph)?,
            u64_at(ph + 8)?,
            u64_at(ph + 16)?,
            u64_at(ph + 32)?,
        );
        match kind {
            1 => loads.push((vaddr, off, filesz)),
            2 => dynamic = Some((us(off)?, us(filesz)?)),
            3 => deps.interp = Some(cstr(us(off)?)?),
            _ => {}
        }
    }
    let Some((dyn_off, dyn_size)) = dynamic else {
        return Ok(deps);
    };
    let mut strtab = None;
    let mut needed_offsets = Vec::new();
    for i in 0..dyn_size / 16 {
        let at = dyn_off + i * 16;
        let (tag, val) = (u64_at(at)?, u64_at(at + 8)?);
        match tag {
            0 => break,
            1 => needed_offsets.push(val),
            5 => strtab = Some(val),
            _ => {}
        }
    }
    if needed_offsets.is_empty() {
        return Ok(deps);
    }
    let strtab = strtab.ok_or("DT_NEEDED without DT_STRTAB")?;
    let (vaddr, off, _) = loads
        .iter()
        .find(|(v, _, size)| *v <= strtab && strtab < v + size)
        .ok_or_else(|| format!("DT_STRTAB {strtab:#x} in no PT_LOAD segment"))?;
    let base = strtab - vaddr + off;
    for n in needed_offsets {
        deps.needed.push(cstr(us(base + n)?)?);
    }
    Ok(deps)
}

/// Resolves a tree-relative path inside `root`, following symbolic links (absolute targets
/// relative to `root`, as the guest will see them). Returns the host path of what it names, or
/// `None` when it does not exist.
///
/// # Errors
/// [`RootfsError::SymlinkLoop`] after 40 links.
pub fn resolve_in_tree(root: &Path, rel: &str) -> Result<Option<PathBuf>, RootfsError> {
    let mut pending: VecDeque<String> = rel
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    let mut parts: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(c) = pending.pop_front() {
        match c.as_str() {
            "." => continue,
            ".." => {
                parts.pop();
                continue;
            }
            _ => {}
        }
        let mut p = root.to_path_buf();
        p.extend(&parts);
        p.push(&c);
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            return Ok(None);
        };
        if meta.file_type().is_symlink() {
            links += 1;
            if links > 40 {
                return Err(RootfsError::SymlinkLoop(rel.to_owned()));
            }
            let target =
                std::fs::read_link(&p).map_err(|_| RootfsError::SymlinkLoop(rel.to_owned()))?;
            let t = target.to_string_lossy();
            if t.starts_with('/') {
                parts.clear();
            }
            for x in t.split('/').rev().filter(|x| !x.is_empty()) {
                pending.push_front(x.to_owned());
            }
        } else {
            parts.push(c);
        }
    }
    let mut p = root.to_path_buf();
    p.extend(&parts);
    Ok(Some(p))
}

/// Checks that each of `binaries` (tree-relative) finds its interpreter and, transitively,
/// every `DT_NEEDED` library in the tree's library directories.
///
/// # Errors
/// [`RootfsError::MissingBinary`], [`RootfsError::MissingLibrary`] naming the first missing
/// one and who needs it, [`RootfsError::BadElf`].
pub fn verify_tree(root: &Path, binaries: &[&str]) -> Result<(), Error> {
    let read = |rel: &str, host: &Path| -> Result<ElfDeps, Error> {
        let data = std::fs::read(host).map_err(io(host))?;
        elf_deps(&data).map_err(|reason| {
            RootfsError::BadElf {
                path: rel.to_owned(),
                reason,
            }
            .into()
        })
    };
    let mut checked = BTreeSet::new();
    // (who needs it, library name)
    let mut queue: VecDeque<(String, String)> = VecDeque::new();
    for bin in binaries {
        let host = resolve_in_tree(root, bin)?
            .ok_or_else(|| RootfsError::MissingBinary((*bin).to_owned()))?;
        let deps = read(bin, &host)?;
        if let Some(interp) = &deps.interp {
            if resolve_in_tree(root, interp)?.is_none() {
                return Err(RootfsError::MissingLibrary {
                    binary: (*bin).to_owned(),
                    library: interp.clone(),
                }
                .into());
            }
        }
        queue.extend(deps.needed.into_iter().map(|n| ((*bin).to_owned(), n)));
    }
    while let Some((who, lib)) = queue.pop_front() {
        if !checked.insert(lib.clone()) {
            continue;
        }
        let mut found = None;
        for d in LIB_DIRS {
            let rel = format!("{d}/{lib}");
            if let Some(h) = resolve_in_tree(root, &rel)? {
                found = Some((rel, h));
                break;
            }
        }
        let Some((rel, host)) = found else {
            return Err(RootfsError::MissingLibrary {
                binary: who,
                library: lib,
            }
            .into());
        };
        let deps = read(&rel, &host)?;
        queue.extend(deps.needed.into_iter().map(|n| (lib.clone(), n)));
    }
    Ok(())
}

/// Moves everything under `from` to `to`, merging directories.
fn merge_into(tree: &Path, from: &Path, to: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    let entries = std::fs::read_dir(from).map_err(io(from))?;
    for e in entries {
        let e = e.map_err(io(from))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let src_dir = std::fs::symlink_metadata(&src).map_err(io(&src))?.is_dir();
        match std::fs::symlink_metadata(&dst) {
            Err(_) => std::fs::rename(&src, &dst).map_err(io(&src))?,
            Ok(m) if m.is_dir() && src_dir => merge_into(tree, &src, &dst)?,
            Ok(_) => {
                // The same link in both halves (a package shipping it twice) is no conflict.
                let same = matches!(
                    (std::fs::read_link(&src), std::fs::read_link(&dst)),
                    (Ok(a), Ok(b)) if a == b
                );
                if !same {
                    let rel = src.strip_prefix(tree).unwrap_or(&src);
                    return Err(
                        RootfsError::MergeConflict(rel.to_string_lossy().into_owned()).into(),
                    );
                }
            }
        }
    }
    std::fs::remove_dir_all(from).map_err(io(from))
}

/// The usr-merge of a Debian 12 system, applied to an unpacked tree: the contents of `lib`
/// and `lib64` move under `usr/`, which the links `lib -> usr/lib`, `lib64 -> usr/lib64` then
/// name. `bin` and `sbin` move under `usr/` too but get no link: the guest's `/bin` is
/// busybox's.
///
/// # Errors
/// [`RootfsError::MergeConflict`], [`Error::Io`].
pub fn usr_merge(tree: &Path) -> Result<(), Error> {
    for (top, link) in [
        ("lib", true),
        ("lib64", true),
        ("bin", false),
        ("sbin", false),
    ] {
        let p = tree.join(top);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => merge_into(tree, &p, &tree.join("usr").join(top))?,
            Ok(_) => continue,
            Err(_) if !link => continue,
            Err(_) => {}
        }
        if link {
            std::os::unix::fs::symlink(format!("usr/{top}"), &p).map_err(io(&p))?;
        }
    }
    Ok(())
}

/// Writes the files the tree lacks for the guest: `/etc/passwd` and `/etc/group` with root
/// and nobody (memcached's `-u` looks the user up; glibc reads these files without an
/// nsswitch.conf).
fn add_etc(tree: &Path) -> Result<(), Error> {
    let etc = tree.join("etc");
    std::fs::create_dir_all(&etc).map_err(io(&etc))?;
    for (name, text) in [
        (
            "passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        ),
        ("group", "root:x:0:\nnogroup:x:65534:\n"),
    ] {
        let p = etc.join(name);
        if !p.exists() {
            std::fs::write(&p, text).map_err(io(&p))?;
        }
    }
    Ok(())
}

impl Rootfs {
    /// The cached tree for `packages`, if a previous fetch completed it.
    #[must_use]
    pub fn cached(cache_dir: &Path, packages: &[&str]) -> Option<Rootfs> {
        let base = cache_dir.join("rootfs");
        let env = std::fs::read_to_string(base.join(format!("{}.env", packages.join("+")))).ok()?;
        let key = env.lines().find_map(|l| l.strip_prefix("key="))?;
        let dir = base.join(key);
        if !dir.join("complete").is_file() {
            return None;
        }
        let list = std::fs::read_to_string(dir.join("packages.txt")).ok()?;
        let packages = list
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, v)| Package {
                name: n.to_owned(),
                version: v.to_owned(),
            })
            .collect();
        Some(Rootfs {
            dir: dir.join("tree"),
            packages,
        })
    }

    /// Returns the cached tree for `packages`, or downloads their closure, unpacks, merges,
    /// prunes and checks it (see the module documentation).
    ///
    /// Needs `apt-get`, `apt-cache` and `dpkg` on the host and the archive reachable on the
    /// first call; no root needed when the cache directory is writable.
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Spawn`]/[`Error::Command`] for the tools, [`Error::Rootfs`]
    /// ([`RootfsError`]) for a missing package, library or binary.
    pub fn fetch(cache_dir: &Path, packages: &[&str]) -> Result<Rootfs, Error> {
        if let Some(r) = Self::cached(cache_dir, packages) {
            return Ok(r);
        }
        let base = cache_dir.join("rootfs");
        std::fs::create_dir_all(&base).map_err(io(&base))?;
        // One fetch at a time: two at once (the tests of one binary run on threads; a lab run
        // beside the test command) share apt's lists directory, and the second apt-get
        // fails with "Unable to lock directory". flock(2) through std: an exclusive lock on
        // a file of the cache, held until this function returns; whoever waited finds the
        // tree the first one built.
        let lock_path = base.join(".fetch.lock");
        let lock = std::fs::File::create(&lock_path).map_err(io(&lock_path))?;
        lock.lock().map_err(io(&lock_path))?;
        if let Some(r) = Self::cached(cache_dir, packages) {
            return Ok(r);
        }
        let apt = base.join("apt");
        for d in ["lists/partial", "cache/archives/partial"] {
            let p = apt.join(d);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
        }
        let list = apt.join("sources.list");
        let line = format!(
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {} {SUITE} main\n",
            archive_uri()
        );
        std::fs::write(&list, line).map_err(io(&list))?;
        // An empty dpkg status: the candidate is the archive's version, not one the host has
        // installed (which apt would prefer and then find no source to download).
        let status = apt.join("status");
        std::fs::write(&status, b"").map_err(io(&status))?;
        let apt_opts = |c: &mut Command| {
            let o = [
                format!("Dir::Etc::SourceList={}", list.display()),
                format!("Dir::State::status={}", status.display()),
                "Dir::Etc::SourceParts=/dev/null".to_owned(),
                format!("Dir::State::Lists={}", apt.join("lists").display()),
                format!("Dir::Cache={}", apt.join("cache").display()),
                "APT::Sandbox::User=root".to_owned(),
            ];
            for x in o {
                c.arg("-o").arg(x);
            }
        };
        let mut update = Command::new("apt-get");
        apt_opts(&mut update);
        run(update.args(["-q", "update"]))?;
        let mut depends = Command::new("apt-cache");
        apt_opts(&mut depends);
        depends.args([
            "depends",
            "--recurse",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
        ]);
        let graph = parse_depends(&String::from_utf8_lossy(&run(depends.args(packages))?));
        let names = closure(&graph, packages, SKIPPED)?;
        let mut show = Command::new("apt-cache");
        apt_opts(&mut show);
        show.args(["show", "--no-all-versions"]);
        let versions = parse_versions(&String::from_utf8_lossy(&run(show.args(&names))?));
        let pkgs = names
            .iter()
            .map(|n| {
                versions
                    .get(n)
                    .map(|v| Package {
                        name: n.clone(),
                        version: v.clone(),
                    })
                    .ok_or_else(|| RootfsError::NoVersion(n.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key = cache_key(packages, &pkgs);
        let dir = base.join(&key);
        if !dir.join("complete").is_file() {
            Self::build(&dir, &pkgs, &apt_opts)?;
        }
        let env = base.join(format!("{}.env", packages.join("+")));
        std::fs::write(&env, format!("key={key}\n")).map_err(io(&env))?;
        Ok(Rootfs {
            dir: dir.join("tree"),
            packages: pkgs,
        })
    }

    /// Downloads and unpacks `pkgs` into `dir/tree` (through a staging directory, so an
    /// interrupted build leaves no half tree behind the `complete` marker).
    fn build(dir: &Path, pkgs: &[Package], apt_opts: &dyn Fn(&mut Command)) -> Result<(), Error> {
        let stage = dir.with_extension(format!("stage-{}", std::process::id()));
        if stage.exists() {
            std::fs::remove_dir_all(&stage).map_err(io(&stage))?;
        }
        let built = Self::build_in(&stage, dir, pkgs, apt_opts);
        if built.is_err() {
            // Best effort: the error at hand says more than a failed clean-up would.
            let _ = std::fs::remove_dir_all(&stage);
        }
        built
    }

    fn build_in(
        stage: &Path,
        dir: &Path,
        pkgs: &[Package],
        apt_opts: &dyn Fn(&mut Command),
    ) -> Result<(), Error> {
        let (debs, tree) = (stage.join("debs"), stage.join("tree"));
        std::fs::create_dir_all(&debs).map_err(io(&debs))?;
        std::fs::create_dir_all(&tree).map_err(io(&tree))?;
        let mut dl = Command::new("apt-get");
        apt_opts(&mut dl);
        dl.current_dir(&debs).args(["-q", "download"]);
        // apt-get download checks each file's hash against the signed index.
        run(dl.args(pkgs.iter().map(|p| format!("{}={}", p.name, p.version))))?;
        let rd = std::fs::read_dir(&debs).map_err(io(&debs))?;
        let mut files: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        files.sort();
        for p in pkgs {
            let prefix = format!("{}_", p.name);
            if !files.iter().any(|f| {
                f.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            }) {
                return Err(RootfsError::NoPackage(p.name.clone()).into());
            }
        }
        for f in &files {
            run(Command::new("dpkg").arg("-x").arg(f).arg(&tree))?;
        }
        usr_merge(&tree)?;
        for p in PRUNED {
            let p = tree.join(p);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(io(&p))?;
            }
        }
        add_etc(&tree)?;
        verify_tree(&tree, CHECKED_BINARIES)?;
        std::fs::remove_dir_all(&debs).map_err(io(&debs))?;
        let list: String = pkgs
            .iter()
            .map(|p| format!("{} {}\n", p.name, p.version))
            .collect();
        let txt = stage.join("packages.txt");
        std::fs::write(&txt, list).map_err(io(&txt))?;
        let done = stage.join("complete");
        std::fs::write(&done, b"").map_err(io(&done))?;
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io(dir))?;
        }
        std::fs::rename(stage, dir).map_err(io(stage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of the real output for memcached, redis-server and numactl on bookworm.
    const DEPENDS: &str = "memcached
  PreDepends: init-system-helpers
  Depends: adduser
  Depends: lsb-base
    sysvinit-utils
  Depends: <perl:any>
    perl
  Depends: libc6
  Depends: libevent-2.1-7
redis-server
  PreDepends: init-system-helpers
  Depends: redis-tools
numactl
  Depends: libc6
  Depends: libnuma1
init-system-helpers
 |Depends: usrmerge
  Depends: usr-is-merged
    usrmerge
adduser
  Depends: passwd
perl
  PreDepends: dpkg
libc6
  Depends: libgcc-s1
libevent-2.1-7
  Depends: libc6
redis-tools
  Depends: adduser
  Depends: libc6
  Depends: libjemalloc2
  Depends: libsystemd0
    libelogind0
 |Depends: libfoo-virtual-user
  Depends: <mail-transport-agent>
    exim4
    postfix
libnuma1
  Depends: libc6
libgcc-s1
libjemalloc2
libsystemd0
  Depends: libzstd1
libelogind0
libzstd1
exim4
postfix
libfoo-virtual-user
usrmerge
usr-is-merged
passwd
dpkg
lsb-base
<perl:any>
  perl
";

    #[test]
    fn depends_output_becomes_groups_of_alternatives() {
        let g = parse_depends(DEPENDS);
        let m = &g["memcached"];
        assert_eq!(m.len(), 6);
        assert_eq!(m[3][0].name, "perl");
        assert!(m[3][0].virtual_pkg);
        assert_eq!(m[3][0].providers, ["perl"]);
        // `|Depends: usrmerge` joins the next line's group.
        let ish = &g["init-system-helpers"];
        assert_eq!(ish.len(), 1);
        assert_eq!(ish[0].len(), 2);
        assert_eq!(ish[0][1].providers, ["usrmerge"]);
        let rt = &g["redis-tools"];
        assert_eq!(rt.len(), 5);
        assert_eq!(rt[4][0].name, "libfoo-virtual-user");
        assert_eq!(rt[4][1].providers, ["exim4", "postfix"]);
        // The virtual package's own entry is not a package.
        assert!(!g.contains_key("<perl:any>") && !g.contains_key("perl:any"));
    }

    #[test]
    fn closure_keeps_the_libraries_and_drops_the_tooling() {
        let g = parse_depends(DEPENDS);
        let c = closure(&g, &["memcached", "redis-server", "numactl"], SKIPPED).expect("closure");
        let got: Vec<&str> = c.iter().map(String::as_str).collect();
        assert_eq!(
            got,
            [
                "libc6",
                "libevent-2.1-7",
                "libfoo-virtual-user",
                "libgcc-s1",
                "libjemalloc2",
                "libnuma1",
                "libsystemd0",
                "libzstd1",
                "memcached",
                "numactl",
                "redis-server",
                "redis-tools",
            ]
        );
        // Without the skip list the tooling comes back (perl through the virtual perl:any).
        let all = closure(&g, &["memcached"], &[]).expect("closure");
        assert!(all.contains("perl") && all.contains("dpkg") && all.contains("usrmerge"));
        assert!(matches!(
            closure(&g, &["nosuchpkg"], SKIPPED),
            Err(RootfsError::NoPackage(p)) if p == "nosuchpkg"
        ));
        // A dependency nothing provides is an error naming it.
        let broken = parse_depends("a\n  Depends: <ghost>\n");
        assert!(matches!(
            closure(&broken, &["a"], &[]),
            Err(RootfsError::NoPackage(p)) if p == "ghost"
        ));
    }

    #[test]
    fn versions_and_the_cache_key_follow_the_package_set() {
        let v = parse_versions(
            "Package: libc6\nVersion: 2.36-9+deb12u10\nArchitecture: amd64\n\nPackage: memcached\nVersion: 1.6.18-1\n",
        );
        assert_eq!(v["libc6"], "2.36-9+deb12u10");
        assert_eq!(v["memcached"], "1.6.18-1");
        let p = |n: &str, v: &str| Package {
            name: n.into(),
            version: v.into(),
        };
        let a = cache_key(&["memcached"], &[p("libc6", "1"), p("memcached", "2")]);
        assert!(a.starts_with("memcached-"));
        assert_eq!(
            a,
            cache_key(&["memcached"], &[p("libc6", "1"), p("memcached", "2")])
        );
        assert_ne!(
            a,
            cache_key(&["memcached"], &[p("libc6", "1"), p("memcached", "3")])
        );
    }

    /// A minimal ELF64 executable image: one PT_LOAD mapping the file at 0x400000, PT_INTERP,
    /// PT_DYNAMIC with DT_STRTAB and the given DT_NEEDED names.
    fn fake_elf(interp: &str, needed: &[&str]) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut offs = Vec::new();
        for n in needed {
            offs.push(strtab.len() as u64);
            strtab.extend_from_slice(n.as_bytes());
            strtab.push(0);
        }
        let phoff = 64usize;
        let interp_off = phoff + 3 * 56;
        let strtab_off = interp_off + interp.len() + 1;
        let dyn_off = (strtab_off + strtab.len() + 7) & !7;
        let ndyn = needed.len() + 2;
        let total = dyn_off + ndyn * 16;
        let mut b = vec![0u8; total];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&(phoff as u64).to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&3u16.to_le_bytes());
        let mut ph = |i: usize, kind: u32, off: usize, vaddr: u64, size: usize| {
            let at = phoff + i * 56;
            b[at..at + 4].copy_from_slice(&kind.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&(off as u64).to_le_bytes());
            b[at + 16..at + 24].copy_from_slice(&vaddr.to_le_bytes());
            b[at + 32..at + 40].copy_from_slice(&(size as u64).to_le_bytes());
        };
        ph(0, 1, 0, 0x40_0000, total);
        ph(
            1,
            3,
            interp_off,
            0x40_0000 + interp_off as u64,
            interp.len() + 1,
        );
        ph(2, 2, dyn_off, 0x40_0000 + dyn_off as u64, ndyn * 16);
        b[interp_off..interp_off + interp.len()].copy_from_slice(interp.as_bytes());
        b[strtab_off..strtab_off + strtab.len()].copy_from_slice(&strtab);
        let mut at = dyn_off;
        let mut put = |tag: u64, val: u64| {
            b[at..at + 8].copy_from_slice(&tag.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&val.to_le_bytes());
            at += 16;
        };
        for o in offs {
            put(1, o);
        }
        put(5, 0x40_0000 + strtab_off as u64);
        put(0, 0);
        b
    }

    #[test]
    fn elf_parser_reads_interp_and_needed() {
        let b = fake_elf(
            "/lib64/ld-linux-x86-64.so.2",
            &["libevent-2.1.so.7", "libc.so.6"],
        );
        let d = elf_deps(&b).expect("parses");
        assert_eq!(d.interp.as_deref(), Some("/lib64/ld-linux-x86-64.so.2"));
        assert_eq!(d.needed, ["libevent-2.1.so.7", "libc.so.6"]);
        assert!(elf_deps(b"#!/bin/sh\n").is_err());
        assert!(elf_deps(&b[..100]).is_err());
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn elf_parser_reads_this_test_binary() {
        let me = std::fs::read("/proc/self/exe").expect("read self");
        let d = elf_deps(&me).expect("parses");
        assert!(d.needed.iter().any(|n| n == "libc.so.6"), "{d:?}");
        assert!(d.interp.is_some_and(|i| i.contains("ld-linux")));
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tierd-rootfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("tmp");
        d
    }

    #[test]
    fn usr_merge_links_lib_and_keeps_both_halves() {
        use std::os::unix::fs::symlink;
        let t = tmp("merge");
        let w = |p: &str, data: &[u8]| {
            let p = t.join(p);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, data).expect("write");
        };
        // bookworm's libc6 layout: /lib/x86_64-linux-gnu and /lib64; others in /usr/lib.
        w("lib/x86_64-linux-gnu/libc.so.6", b"libc");
        w("lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", b"ld");
        std::fs::create_dir_all(t.join("lib64")).expect("mkdir");
        symlink(
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            t.join("lib64/ld-linux-x86-64.so.2"),
        )
        .expect("link");
        w("usr/lib/x86_64-linux-gnu/libevent-2.1.so.7.0.1", b"ev");
        symlink(
            "libevent-2.1.so.7.0.1",
            t.join("usr/lib/x86_64-linux-gnu/libevent-2.1.so.7"),
        )
        .expect("link");
        w("usr/bin/memcached", b"mc");
        usr_merge(&t).expect("merge");
        assert_eq!(
            std::fs::read_link(t.join("lib")).expect("lib is a link"),
            Path::new("usr/lib")
        );
        assert!(t.join("usr/lib/x86_64-linux-gnu/libc.so.6").is_file());
        assert!(t
            .join("usr/lib/x86_64-linux-gnu/libevent-2.1.so.7.0.1")
            .is_file());
        assert!(
            !t.join("bin").exists(),
            "no /bin link: the guest's /bin is busybox"
        );
        // The interpreter resolves inside the tree through two links.
        let ld = resolve_in_tree(&t, "/lib64/ld-linux-x86-64.so.2")
            .expect("resolves")
            .expect("exists");
        assert_eq!(std::fs::read(ld).expect("read"), b"ld");
        let ev = resolve_in_tree(&t, "lib/x86_64-linux-gnu/libevent-2.1.so.7")
            .expect("resolves")
            .expect("exists");
        assert_eq!(std::fs::read(ev).expect("read"), b"ev");
        assert_eq!(resolve_in_tree(&t, "usr/lib/none.so").expect("ok"), None);
        // A file at the same path in both halves is a conflict, named.
        w("lib/x.so", b"1");
        std::fs::remove_file(t.join("lib")).expect("unlink");
        std::fs::create_dir_all(t.join("lib")).expect("mkdir");
        w("lib/x.so", b"1");
        w("usr/lib/x.so", b"2");
        assert!(matches!(
            usr_merge(&t),
            Err(Error::Rootfs(RootfsError::MergeConflict(p))) if p == "lib/x.so"
        ));
        symlink("loop", t.join("loop")).expect("link");
        assert!(matches!(
            resolve_in_tree(&t, "loop"),
            Err(RootfsError::SymlinkLoop(_))
        ));
        std::fs::remove_dir_all(&t).ok();
    }

    #[test]
    fn verify_names_the_missing_library_and_who_needs_it() {
        use std::os::unix::fs::symlink;
        let t = tmp("verify");
        let w = |p: &str, data: &[u8]| {
            let p = t.join(p);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, data).expect("write");
        };
        let interp = "/lib64/ld-linux-x86-64.so.2";
        w(
            "usr/bin/memcached",
            &fake_elf(interp, &["libevent-2.1.so.7", "libc.so.6"]),
        );
        w("usr/lib/x86_64-linux-gnu/libc.so.6", &fake_elf(interp, &[]));
        w(
            "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            &fake_elf("", &[]),
        );
        std::fs::create_dir_all(t.join("usr/lib64")).expect("mkdir");
        symlink(
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            t.join("usr/lib64/ld-linux-x86-64.so.2"),
        )
        .expect("link");
        symlink("usr/lib", t.join("lib")).expect("link");
        symlink("usr/lib64", t.join("lib64")).expect("link");
        // libevent needs libssl, which is missing.
        w(
            "usr/lib/x86_64-linux-gnu/libevent-2.1.so.7",
            &fake_elf(interp, &["libssl.so.3", "libc.so.6"]),
        );
        match verify_tree(&t, &["usr/bin/memcached"]) {
            Err(Error::Rootfs(RootfsError::MissingLibrary { binary, library })) => {
                assert_eq!(
                    (binary.as_str(), library.as_str()),
                    ("libevent-2.1.so.7", "libssl.so.3")
                );
            }
            other => panic!("expected a missing libssl, got {other:?}"),
        }
        w(
            "usr/lib/x86_64-linux-gnu/libssl.so.3",
            &fake_elf(interp, &["libc.so.6"]),
        );
        verify_tree(&t, &["usr/bin/memcached"]).expect("complete");
        assert!(matches!(
            verify_tree(&t, &["usr/bin/redis-server"]),
            Err(Error::Rootfs(RootfsError::MissingBinary(_)))
        ));
        // Without the interpreter the binary cannot start.
        std::fs::remove_file(t.join("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")).expect("rm");
        assert!(matches!(
            verify_tree(&t, &["usr/bin/memcached"]),
            Err(Error::Rootfs(RootfsError::MissingLibrary { library, .. })) if library == interp
        ));
        std::fs::remove_dir_all(&t).ok();
    }
}
