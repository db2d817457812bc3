//! The guest kernel: Debian bookworm-backports `linux-image-6.12.*+deb12-amd64`, fetched
//! with a *private* apt configuration (the system's sources are never changed) and turned
//! into an uncompressed ELF `vmlinux` that QEMU boots through the PVH entry point.
//!
//! Why this kernel (vmlab.md 2 and 5.1): it is a stock distribution kernel with NUMA
//! balancing, DAMON (vaddr, paddr, sysfs) and HMAT built in, and 6.10+ is needed for a
//! CPU-less node present at boot to get its tier from HMAT (6.1 puts it with DRAM).
//!
//! Cache layout under the cache directory (default `target/vmlab`, env `TIERD_VM_CACHE`):
//! `apt/` (private sources.list, lists, archives), `debs/*.deb`, `kernel-<version>/vmlinux`
//! and `kernel.env` naming the current one (`version=`, `package=`, `package_version=`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// Environment variable that overrides the cache directory.
pub const CACHE_ENV: &str = "TIERD_VM_CACHE";

/// The apt suite the kernel comes from.
pub const SUITE: &str = "bookworm-backports";
/// The metapackage that depends on exactly one current image package.
pub const META_PACKAGE: &str = "linux-image-amd64";
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

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn run(cmd: &mut Command) -> Result<Vec<u8>, Error> {
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
fn archive_uri() -> String {
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

/// Parses `apt-cache show linux-image-amd64` output: the image package it depends on and
/// the version (first stanza = the candidate apt would pick).
///
/// # Errors
/// [`Error::NoKernelPackage`] when no stanza names a `linux-image-6.12` dependency.
pub fn parse_meta_show(show: &str) -> Result<(String, String), Error> {
    for stanza in show.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let (Some(dep), Some(ver)) = (field("Depends:"), field("Version:")) else {
            continue;
        };
        let pkg = dep.split([' ', ',', '(']).next().unwrap_or_default();
        if pkg.starts_with("linux-image-6.12.") {
            return Ok((pkg.to_owned(), ver.to_owned()));
        }
    }
    Err(Error::NoKernelPackage(format!(
        "no linux-image-6.12.* dependency in `apt-cache show {META_PACKAGE}`"
    )))
}

/// Finds the compressed payload of an x86 bzImage and checks it is zstd.
///
/// The boot protocol header (Documentation/arch/x86/boot.rst): `setup_sects` at 0x1f1
/// (0 means 4), magic `HdrS` at 0x202, `payload_offset` (0x248) and `payload_length`
/// (0x24c) relative to the protected-mode code, which starts after `(setup_sects+1)*512`
/// bytes. The build appends the uncompressed size as a 4-byte little-endian word to the
/// compressed stream (arch/x86/boot/compressed/Makefile, `zstd22_with_size`; misc.c reads
/// it back), so the payload is returned as the zstd stream and that size; with both,
/// `zstd -d` exits cleanly (vmlab.md's magic search left the trailer in) and the output
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
    /// The cached kernel, if `kernel.env` and its vmlinux exist.
    #[must_use]
    pub fn cached(cache_dir: &Path) -> Option<Kernel> {
        let env = std::fs::read_to_string(cache_dir.join("kernel.env")).ok()?;
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

    /// Returns the cached kernel, or downloads, unpacks and decompresses it.
    ///
    /// Needs `apt-get`, `apt-cache`, `dpkg` and `zstd` on the host and the Debian archive
    /// reachable; no root needed when the cache directory is writable (apt downloads as
    /// the calling user).
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::Spawn`]/[`Error::Command`] for the tools,
    /// [`Error::NoKernelPackage`], [`Error::BadKernelImage`].
    pub fn fetch(cache_dir: &Path) -> Result<Kernel, Error> {
        if let Some(k) = Self::cached(cache_dir) {
            return Ok(k);
        }
        let apt = cache_dir.join("apt");
        for d in ["lists/partial", "cache/archives/partial"] {
            let p = apt.join(d);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
        }
        let debs = cache_dir.join("debs");
        std::fs::create_dir_all(&debs).map_err(io(&debs))?;
        let list = apt.join("sources.list");
        let line = format!(
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {} {SUITE} main\n",
            archive_uri()
        );
        std::fs::write(&list, line).map_err(io(&list))?;
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
        let (package, package_version) = parse_meta_show(&String::from_utf8_lossy(&show))?;
        let version = package.trim_start_matches("linux-image-").to_owned();
        let deb_glob = format!("{package}_");
        let find_deb = || -> Option<PathBuf> {
            std::fs::read_dir(&debs)
                .ok()?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&deb_glob) && n.ends_with(".deb"))
                })
        };
        let deb = match find_deb() {
            Some(d) => d,
            None => {
                let mut dl = Command::new("apt-get");
                apt_opts(&mut dl);
                run(dl.current_dir(&debs).args([
                    "-q",
                    "download",
                    &format!("{package}={package_version}"),
                ]))?;
                find_deb().ok_or_else(|| {
                    Error::NoKernelPackage(format!(
                        "{package}: download left no .deb in {}",
                        debs.display()
                    ))
                })?
            }
        };
        let kdir = cache_dir.join(format!("kernel-{version}"));
        let unpacked = kdir.join("deb");
        if unpacked.exists() {
            std::fs::remove_dir_all(&unpacked).map_err(io(&unpacked))?;
        }
        std::fs::create_dir_all(&unpacked).map_err(io(&unpacked))?;
        run(Command::new("dpkg").arg("-x").arg(&deb).arg(&unpacked))?;
        let vmlinuz = unpacked.join("boot").join(format!("vmlinuz-{version}"));
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
        // Keep the config for reference; drop the rest of the unpacked package (modules).
        let config = unpacked.join("boot").join(format!("config-{version}"));
        let _ = std::fs::copy(&config, kdir.join("config"));
        std::fs::remove_dir_all(&unpacked).map_err(io(&unpacked))?;
        std::fs::remove_file(&zst).map_err(io(&zst))?;
        let env = cache_dir.join("kernel.env");
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
