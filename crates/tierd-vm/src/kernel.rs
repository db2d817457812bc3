//! The guest kernels: Debian's `linux-image-amd64` from one of two places, fetched with a
//! *private* apt configuration (the system's sources are never changed; apt checks the
//! archive's Release signature against the Debian archive keyring and every package's hash)
//! and turned into an uncompressed ELF `vmlinux` that QEMU boots through the PVH entry point.
//!
//! * [`KernelChoice::Lts`] (`6.12`): bookworm-backports' 6.12, the lab's kernel since it began.
//!   Why 6.12 (docs/lab.md, first guest runs, 1): a stock distribution kernel with NUMA balancing, DAMON
//!   (vaddr, paddr, sysfs) and HMAT built in, and 6.10+ is needed for a CPU-less node present
//!   at boot to get its tier from HMAT (6.1 puts it with DRAM).
//! * [`KernelChoice::Newest`] (`newest`): the highest `linux-image-amd64` of trixie-backports
//!   and sid (7.3 at the time of writing); experimental's release candidates are left out.
//!   7.x adds what the strongest baselines need: DAMOS quota goals on a node's used/free memory
//!   and monitoring-intervals auto-tuning (6.16, DAMON's self-tuning tiering). Its image
//!   package is split: the `vmlinuz` is in `linux-binary-<version>`, the config in
//!   `linux-base-<version>`, both under `usr/lib/modules/<version>/`.
//!
//! Cache layout under the cache directory (default `target/vmlab`, env `TIERD_VM_CACHE`):
//! `apt-<choice>/` (private sources.list, lists, archives; `apt/` for 6.12 as before),
//! `debs/*.deb`, `kernel-<version>/vmlinux` and `kernel.env` (6.12) or `kernel-newest.env`
//! naming the current one (`version=`, `package=`, `package_version=`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// Environment variable that overrides the cache directory.
pub const CACHE_ENV: &str = "TIERD_VM_CACHE";

/// The apt suite the 6.12 kernel comes from.
pub const SUITE: &str = "bookworm-backports";
/// The suites searched for the newest kernel (the highest version wins).
pub const NEWEST_SUITES: &[&str] = &["trixie-backports", "sid"];
/// The metapackage that depends on exactly one current image package.
pub const META_PACKAGE: &str = "linux-image-amd64";
/// Environment variable naming the kernel the lab and guest tests use (`6.12` or `newest`).
pub const KERNEL_ENV: &str = "TIERD_LAB_KERNEL";

/// Which Debian kernel a guest boots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KernelChoice {
    /// bookworm-backports' 6.12 (`6.12`).
    Lts,
    /// The newest kernel in Debian's archive (`newest`).
    #[default]
    Newest,
}

impl KernelChoice {
    /// Both, in the order `tierd lab --kernel both` runs them.
    pub const BOTH: [KernelChoice; 2] = [KernelChoice::Lts, KernelChoice::Newest];

    /// The name on the command line and in results.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            KernelChoice::Lts => "6.12",
            KernelChoice::Newest => "newest",
        }
    }

    /// `$TIERD_LAB_KERNEL`, else the default ([`KernelChoice::Newest`]).
    ///
    /// # Errors
    /// [`Error::NoKernelPackage`] when the variable names no kernel.
    pub fn from_env() -> Result<KernelChoice, Error> {
        match std::env::var(KERNEL_ENV) {
            Ok(v) if !v.is_empty() => v.parse(),
            _ => Ok(KernelChoice::default()),
        }
    }

    fn suites(self) -> &'static [&'static str] {
        match self {
            KernelChoice::Lts => &[SUITE],
            KernelChoice::Newest => NEWEST_SUITES,
        }
    }

    /// The image package names this choice accepts (`linux-image-<prefix>...`).
    fn image_prefix(self) -> &'static str {
        match self {
            KernelChoice::Lts => "linux-image-6.12.",
            KernelChoice::Newest => "linux-image-",
        }
    }

    fn env_file(self) -> &'static str {
        match self {
            KernelChoice::Lts => "kernel.env",
            KernelChoice::Newest => "kernel-newest.env",
        }
    }

    fn apt_dir(self) -> &'static str {
        match self {
            KernelChoice::Lts => "apt",
            KernelChoice::Newest => "apt-newest",
        }
    }
}

impl std::fmt::Display for KernelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KernelChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "6.12" | "lts" => Ok(KernelChoice::Lts),
            "newest" => Ok(KernelChoice::Newest),
            other => Err(Error::NoKernelPackage(format!(
                "unknown kernel {other:?}: expected 6.12 or newest"
            ))),
        }
    }
}

/// Archive used when the system's sources do not name one.
pub const FALLBACK_URI: &str = "http://deb.debian.org/debian";

/// A fetched, decompressed kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The ELF vmlinux QEMU boots with `-kernel`.
    pub vmlinux: PathBuf,
    /// `uname -r` of the kernel, e.g. `6.12.95+deb12-amd64`.
    pub version: String,
    /// The Debian package, e.g. `linux-image-6.12.95+deb12-amd64`.
    pub package: String,
    /// Its Debian version, e.g. `6.12.95-1~bpo12+1`.
    pub package_version: String,
}

/// The default cache directory: `$TIERD_VM_CACHE`, else `<workspace>/target/vmlab`.
#[must_use]
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(CACHE_ENV) {
        return PathBuf::from(d);
    }
    // CARGO_MANIFEST_DIR is crates/tierd-vm at build time; the workspace is two levels up.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/vmlab")
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn run(cmd: &mut Command) -> Result<Vec<u8>, Error> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|source| Error::Spawn {
        program: shown.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: shown,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr)
                .chars()
                .rev()
                .take(2000)
                .collect::<String>()
                .chars()
                .rev()
                .collect(),
        });
    }
    Ok(out.stdout)
}

/// The Debian archive URI of the system's sources (deb822 `URIs:` or one-line `deb` form).
pub(crate) fn archive_uri() -> String {
    let deb822 =
        std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
    if let Some(u) = deb822.lines().find_map(|l| l.strip_prefix("URIs:")) {
        if let Some(first) = u.split_whitespace().next() {
            return first.to_owned();
        }
    }
    let list = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    for l in list.lines() {
        let mut w = l.split_whitespace().filter(|w| !w.starts_with('['));
        if w.next() == Some("deb") {
            if let Some(u) = w.next() {
                if u.contains("debian") && !u.contains("security") {
                    return u.to_owned();
                }
            }
        }
    }
    FALLBACK_URI.to_owned()
}

/// Every `(image package, version)` that the stanzas of `apt-cache show linux-image-amd64`
/// name, for image packages starting with `prefix`, in the order apt printed them.
#[must_use]
pub fn meta_candidates(show: &str, prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for stanza in show.split("\n\n") {
        let (Some(dep), Some(ver)) = (field(stanza, "Depends:"), field(stanza, "Version:")) else {
            continue;
        };
        // 7.x's metapackage also depends on linux-base-amd64 and linux-modules-amd64: take
        // the one image package among its dependencies.
        let image = dep
            .split(',')
            .filter_map(|d| d.split_whitespace().next())
            .find(|p| p.starts_with(prefix) && p.ends_with("-amd64") && *p != META_PACKAGE);
        if let Some(pkg) = image {
            out.push((pkg.to_owned(), ver.to_owned()));
        }
    }
    out
}

/// A field of one deb822 stanza (first line only; the fields used here are one-line).
fn field<'a>(stanza: &'a str, name: &str) -> Option<&'a str> {
    stanza
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// Parses `apt-cache show linux-image-amd64` output: the 6.12 image package it depends on
/// and the version (first stanza = the candidate apt would pick).
///
/// # Errors
/// [`Error::NoKernelPackage`] when no stanza names a `linux-image-6.12` dependency.
pub fn parse_meta_show(show: &str) -> Result<(String, String), Error> {
    meta_candidates(show, KernelChoice::Lts.image_prefix())
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::NoKernelPackage(format!(
                "no linux-image-6.12.* dependency in `apt-cache show {META_PACKAGE}`"
            ))
        })
}

/// The packages besides the image that hold its files on 7.x (`linux-binary-<v>`: the
/// `vmlinuz`; `linux-base-<v>`: the config), from the image package's `Depends:`.
#[must_use]
pub fn split_packages(image_show: &str, version: &str) -> Vec<String> {
    let wanted = [
        format!("linux-binary-{version}"),
        format!("linux-base-{version}"),
    ];
    field(image_show, "Depends:")
        .unwrap_or_default()
        .split([',', '|'])
        .filter_map(|d| d.split_whitespace().next())
        .filter(|p| wanted.iter().any(|w| w == p))
        .map(str::to_owned)
        .collect()
}

/// Finds the compressed payload of an x86 bzImage and checks it is zstd.
///
/// The boot protocol header (Documentation/arch/x86/boot.rst): `setup_sects` at 0x1f1
/// (0 means 4), magic `HdrS` at 0x202, `payload_offset` (0x248) and `payload_length`
/// (0x24c) relative to the protected-mode code, which starts after `(setup_sects+1)*512`
/// bytes. The build appends the uncompressed size as a 4-byte little-endian word to the
/// compressed stream (arch/x86/boot/compressed/Makefile, `zstd22_with_size`; misc.c reads
/// it back), so the payload is returned as the zstd stream and that size; with both,
/// `zstd -d` exits cleanly (a search for the zstd magic alone leaves the trailer in) and the output
/// length can be checked.
///
/// # Errors
/// [`Error::BadKernelImage`] when the header or the payload is not what is expected.
pub fn bzimage_payload(image: &[u8]) -> Result<(&[u8], u64), Error> {
    let bad = |reason: String| Error::BadKernelImage { reason };
    if image.get(0x202..0x206) != Some(b"HdrS") {
        return Err(bad("no `HdrS` boot header at 0x202".into()));
    }
    let setup_sects = match image[0x1f1] {
        0 => 4,
        n => usize::from(n),
    };
    let le32 = |at: usize| -> Result<usize, Error> {
        let b: [u8; 4] = image
            .get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| bad(format!("image too short for the field at {at:#x}")))?;
        usize::try_from(u32::from_le_bytes(b)).map_err(|_| bad("field does not fit usize".into()))
    };
    let start = (setup_sects + 1) * 512 + le32(0x248)?;
    let len = le32(0x24c)?;
    let payload = image.get(start..start + len).ok_or_else(|| {
        bad(format!(
            "payload {start:#x}+{len:#x} beyond the image ({:#x} bytes)",
            image.len()
        ))
    })?;
    if !payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return Err(bad(
            "payload is not zstd (CONFIG_KERNEL_ZSTD expected)".into()
        ));
    }
    let (stream, size) = payload.split_at(payload.len().saturating_sub(4));
    let size: [u8; 4] = size
        .try_into()
        .map_err(|_| bad("payload shorter than its size trailer".into()))?;
    Ok((stream, u64::from(u32::from_le_bytes(size))))
}

impl Kernel {
    /// The cached 6.12 kernel, if `kernel.env` and its vmlinux exist.
    #[must_use]
    pub fn cached(cache_dir: &Path) -> Option<Kernel> {
        Self::cached_choice(cache_dir, KernelChoice::Lts)
    }

    /// The cached kernel of `choice`, if its env file and vmlinux exist.
    #[must_use]
    pub fn cached_choice(cache_dir: &Path, choice: KernelChoice) -> Option<Kernel> {
        let env = std::fs::read_to_string(cache_dir.join(choice.env_file())).ok()?;
        let get = |k: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .map(str::to_owned)
        };
        let version = get("version")?;
        let vmlinux = cache_dir.join(format!("kernel-{version}")).join("vmlinux");
        vmlinux.is_file().then(|| Kernel {
            vmlinux,
            version,
            package: get("package").unwrap_or_default(),
            package_version: get("package_version").unwrap_or_default(),
        })
    }

    /// `(major, minor)` of [`Kernel::version`] (`7.3.4+deb13-amd64` gives `(7, 3)`), or
    /// `(0, 0)` when it does not start with two numbers.
    #[must_use]
    pub fn major_minor(&self) -> (u32, u32) {
        let mut it = self
            .version
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().ok());
        match (it.next().flatten(), it.next().flatten()) {
            (Some(a), Some(b)) => (a, b),
            _ => (0, 0),
        }
    }

    /// Returns the cached 6.12 kernel, or downloads it ([`Kernel::fetch_choice`]).
    ///
    /// # Errors
    /// As [`Kernel::fetch_choice`].
    pub fn fetch(cache_dir: &Path) -> Result<Kernel, Error> {
        Self::fetch_choice(cache_dir, KernelChoice::Lts)
    }

    /// Returns the cached kernel of `choice`, or downloads, unpacks and decompresses it.
    ///
    /// Needs `apt-get`, `apt-cache`, `dpkg` and `zstd` on the host and the Debian archive
    /// reachable; no root needed when the cache directory is writable (apt downloads as
    /// the calling user).
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Spawn`]/[`Error::Command`] for the tools,
    /// [`Error::NoKernelPackage`], [`Error::BadKernelImage`].
    pub fn fetch_choice(cache_dir: &Path, choice: KernelChoice) -> Result<Kernel, Error> {
        if let Some(k) = Self::cached_choice(cache_dir, choice) {
            return Ok(k);
        }
        let apt = cache_dir.join(choice.apt_dir());
        for d in ["lists/partial", "cache/archives/partial"] {
            let p = apt.join(d);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
        }
        let debs = cache_dir.join("debs");
        std::fs::create_dir_all(&debs).map_err(io(&debs))?;
        let list = apt.join("sources.list");
        let uri = archive_uri();
        let lines: String = choice
            .suites()
            .iter()
            .map(|suite| {
                format!(
                    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {uri} {suite} main\n"
                )
            })
            .collect();
        std::fs::write(&list, lines).map_err(io(&list))?;
        // A private apt: our own source list, lists and archive cache; system sources and
        // state are left untouched.
        let apt_opts = |c: &mut Command| {
            let o = [
                format!("Dir::Etc::SourceList={}", list.display()),
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
        let mut show = Command::new("apt-cache");
        apt_opts(&mut show);
        let show = run(show.args(["show", META_PACKAGE]))?;
        let candidates = meta_candidates(&String::from_utf8_lossy(&show), choice.image_prefix());
        // The highest version among the suites (apt's own candidate follows pin priorities,
        // under which sid beats a newer trixie-backports); dpkg compares Debian versions.
        let mut best: Option<(String, String)> = None;
        for c in candidates {
            let newer = match &best {
                None => true,
                Some((_, v)) => Command::new("dpkg")
                    .args(["--compare-versions", &c.1, "gt", v])
                    .status()
                    .map_err(|source| Error::Spawn {
                        program: "dpkg --compare-versions".into(),
                        source,
                    })?
                    .success(),
            };
            if newer {
                best = Some(c);
            }
        }
        let (package, package_version) = best.ok_or_else(|| {
            Error::NoKernelPackage(format!(
                "no {}* dependency in `apt-cache show {META_PACKAGE}` of {}",
                choice.image_prefix(),
                choice.suites().join(", ")
            ))
        })?;
        let version = package.trim_start_matches("linux-image-").to_owned();
        let mut pkgs = vec![package.clone()];
        let mut image_show = Command::new("apt-cache");
        apt_opts(&mut image_show);
        let image_show = run(image_show.args(["show", &format!("{package}={package_version}")]))?;
        pkgs.extend(split_packages(
            &String::from_utf8_lossy(&image_show),
            &version,
        ));
        let kdir = cache_dir.join(format!("kernel-{version}"));
        let unpacked = kdir.join("deb");
        if unpacked.exists() {
            std::fs::remove_dir_all(&unpacked).map_err(io(&unpacked))?;
        }
        std::fs::create_dir_all(&unpacked).map_err(io(&unpacked))?;
        for pkg in &pkgs {
            let deb = download(&debs, pkg, &package_version, &apt_opts)?;
            run(Command::new("dpkg").arg("-x").arg(&deb).arg(&unpacked))?;
        }
        // 6.12 ships boot/vmlinuz-<v>; 7.x usr/lib/modules/<v>/vmlinuz.
        let modules = unpacked.join("usr/lib/modules").join(&version);
        let vmlinuz = [
            unpacked.join("boot").join(format!("vmlinuz-{version}")),
            modules.join("vmlinuz"),
        ]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| Error::BadKernelImage {
            reason: format!("no vmlinuz for {version} in {}", pkgs.join(", ")),
        })?;
        let image = std::fs::read(&vmlinuz).map_err(io(&vmlinuz))?;
        let (payload, size) = bzimage_payload(&image)?;
        let zst = kdir.join("vmlinux.zst");
        std::fs::write(&zst, payload).map_err(io(&zst))?;
        let vmlinux = kdir.join("vmlinux");
        run(Command::new("zstd")
            .args(["-q", "-d", "-f", "-o"])
            .arg(&vmlinux)
            .arg(&zst))?;
        let head = std::fs::read(&vmlinux).map_err(io(&vmlinux))?;
        if !head.starts_with(b"\x7fELF") || head.len() as u64 != size {
            return Err(Error::BadKernelImage {
                reason: format!(
                    "{}: not an ELF file of the {size} bytes the bzImage announces",
                    vmlinux.display()
                ),
            });
        }
        // Keep the config for reference; drop the rest of the unpacked packages (modules).
        for config in [
            unpacked.join("boot").join(format!("config-{version}")),
            modules.join("config"),
        ] {
            if config.is_file() {
                let _ = std::fs::copy(&config, kdir.join("config"));
            }
        }
        std::fs::remove_dir_all(&unpacked).map_err(io(&unpacked))?;
        std::fs::remove_file(&zst).map_err(io(&zst))?;
        let env = cache_dir.join(choice.env_file());
        std::fs::write(
            &env,
            format!("version={version}\npackage={package}\npackage_version={package_version}\n"),
        )
        .map_err(io(&env))?;
        Ok(Kernel {
            vmlinux,
            version,
            package,
            package_version,
        })
    }
}

/// The cached `.deb` of `package` at `version` in `debs`, downloaded first if missing.
fn download(
    debs: &Path,
    package: &str,
    version: &str,
    apt_opts: &dyn Fn(&mut Command),
) -> Result<PathBuf, Error> {
    let prefix = format!("{package}_");
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(debs)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
            })
    };
    if let Some(d) = find() {
        return Ok(d);
    }
    let mut dl = Command::new("apt-get");
    apt_opts(&mut dl);
    run(dl
        .current_dir(debs)
        .args(["-q", "download", &format!("{package}={version}")]))?;
    find().ok_or_else(|| {
        Error::NoKernelPackage(format!(
            "{package}: download left no .deb in {}",
            debs.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_package_stanza_names_the_image() {
        let show = "Package: linux-image-amd64\nSource: linux-signed-amd64 (6.12.95+1~bpo12+1)\nVersion: 6.12.95-1~bpo12+1\nDepends: linux-image-6.12.95+deb12-amd64 (= 6.12.95-1~bpo12+1)\n\nPackage: linux-image-amd64\nVersion: 6.1.140-1\nDepends: linux-image-6.1.0-37-amd64 (= 6.1.140-1)\n";
        let (pkg, ver) = parse_meta_show(show).expect("found");
        assert_eq!(pkg, "linux-image-6.12.95+deb12-amd64");
        assert_eq!(ver, "6.12.95-1~bpo12+1");
        assert!(matches!(
            parse_meta_show(
                "Package: linux-image-amd64\nVersion: 6.1\nDepends: linux-image-6.1.0-37-amd64\n"
            ),
            Err(Error::NoKernelPackage(_))
        ));
    }

    #[test]
    fn newest_is_chosen_among_every_suite_and_split_packages_are_found() {
        let show = "Package: linux-image-amd64\nVersion: 7.3.4-1~bpo13+1\nDepends: linux-base-amd64 (= 7.3.4-1~bpo13+1), linux-image-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), linux-modules-amd64 (= 7.3.4-1~bpo13+1)\n\nPackage: linux-image-amd64\nVersion: 7.2.13-1\nDepends: linux-base-amd64 (= 7.2.13-1), linux-image-7.2.13+deb14-amd64 (= 7.2.13-1)\n";
        let c = meta_candidates(show, KernelChoice::Newest.image_prefix());
        assert_eq!(
            c,
            vec![
                (
                    "linux-image-7.3.4+deb13-amd64".to_owned(),
                    "7.3.4-1~bpo13+1".to_owned()
                ),
                (
                    "linux-image-7.2.13+deb14-amd64".to_owned(),
                    "7.2.13-1".to_owned()
                ),
            ]
        );
        assert!(meta_candidates(show, KernelChoice::Lts.image_prefix()).is_empty());
        let image = "Package: linux-image-7.3.4+deb13-amd64\nDepends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, linux-base-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), linux-binary-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), linux-modules-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1)\n";
        assert_eq!(
            split_packages(image, "7.3.4+deb13-amd64"),
            vec![
                "linux-base-7.3.4+deb13-amd64",
                "linux-binary-7.3.4+deb13-amd64"
            ]
        );
        // 6.12's image package holds its own vmlinuz: nothing else to fetch.
        assert!(split_packages(
            "Depends: kmod, linux-base (>= 4.3~)\n",
            "6.12.95+deb12-amd64"
        )
        .is_empty());
        let k = Kernel {
            vmlinux: PathBuf::new(),
            version: "7.3.4+deb13-amd64".into(),
            package: String::new(),
            package_version: String::new(),
        };
        assert_eq!(k.major_minor(), (7, 3));
        assert_eq!(
            "newest".parse::<KernelChoice>().ok(),
            Some(KernelChoice::Newest)
        );
        assert_eq!("6.12".parse::<KernelChoice>().ok(), Some(KernelChoice::Lts));
        assert!("6.1".parse::<KernelChoice>().is_err());
    }

    #[test]
    fn bzimage_header_locates_the_zstd_payload() {
        let mut img = vec![0u8; 4096];
        img[0x1f1] = 2; // setup_sects: protected-mode code at 3*512
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x248..0x24c].copy_from_slice(&100u32.to_le_bytes());
        img[0x24c..0x250].copy_from_slice(&10u32.to_le_bytes());
        let at = 3 * 512 + 100;
        img[at..at + 10].copy_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 0x34, 0x12, 0, 0]);
        let (stream, size) = bzimage_payload(&img).expect("payload");
        assert_eq!(stream, [0x28, 0xb5, 0x2f, 0xfd, 1, 2]);
        assert_eq!(size, 0x1234);
        img[at] = 0x1f; // gzip-ish: refused
        assert!(matches!(
            bzimage_payload(&img),
            Err(Error::BadKernelImage { .. })
        ));
        img[0x24c..0x250].copy_from_slice(&100_000u32.to_le_bytes());
        assert!(matches!(
            bzimage_payload(&img),
            Err(Error::BadKernelImage { .. })
        ));
        assert!(matches!(
            bzimage_payload(b"short"),
            Err(Error::BadKernelImage { .. })
        ));
    }
}
