//! tierd-vm: a guest harness that boots a stock Linux 6.12 kernel in QEMU on a machine
//! whose second NUMA node is a CPU-less, slower memory tier (advertised through ACPI
//! HMAT), runs a shell script inside, and brings output and files back.
//!
//! Pieces: [`Kernel::fetch`] (Debian bookworm-backports kernel through a private apt
//! configuration), [`Initramfs`] (busybox-static root with a project `/init`),
//! [`GuestSpec`] (topology and QEMU arguments), [`run`] (start, time out, collect), the
//! console file export of [`export`], and [`fixtures`] (captures real `/proc` and `/sys`
//! files for the Linux backend's parser tests).
//!
//! The recipe and its caveats (TCG instead of kvm-pvm, the Accessed-bit artefact of TCG's
//! big software TLB) are in docs/lab.md, "The first guest runs"; host packages
//! are installed by `scripts/vm-deps.sh`.

use std::path::PathBuf;
use std::time::Duration;

pub mod binaries;
pub mod cpio;
pub mod export;
pub mod fixtures;
pub mod guest;
pub mod initramfs;
pub mod kernel;
pub mod rootfs;
pub mod spec;

pub use export::{decode_exports, ExportedFile};
pub use guest::{detect_accel, run, Guest, GuestOutput};
pub use initramfs::Initramfs;
pub use kernel::{default_cache_dir, Kernel, KernelChoice};
pub use spec::{Accel, GuestSpec, HmatLink, NodeSpec};

/// Everything that can go wrong in the harness.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory operation failed.
    #[error("I/O on {path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A program could not be started.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program (and arguments).
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A host tool ran but failed.
    #[error("{cmd} failed ({status}): {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// The tail of its stderr.
        stderr: String,
    },
    /// The kernel package could not be found.
    #[error("kernel package: {0}")]
    NoKernelPackage(String),
    /// The kernel image is not the expected zstd bzImage.
    #[error("kernel image: {reason}")]
    BadKernelImage {
        /// What is wrong.
        reason: String,
    },
    /// A cpio archive could not be written or parsed.
    #[error("cpio: {0}")]
    Cpio(String),
    /// A guest path is unusable.
    #[error("guest path {path:?}: {reason}")]
    BadGuestPath {
        /// The path.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A file exported through the console is damaged.
    #[error("exported file {name:?}: {reason}")]
    Export {
        /// The file's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The Debian root filesystem of real servers is incomplete ([`rootfs`]).
    #[error("guest rootfs: {0}")]
    Rootfs(#[from] rootfs::RootfsError),
    /// The guest topology is invalid.
    #[error("guest spec: {0}")]
    Spec(String),
    /// The guest did not finish in time; qemu was killed.
    #[error(
        "guest did not finish within {timeout:?}{}; last console lines:\n{tail}",
        if *.reached_init { "" } else { " (the kernel never reached /init)" }
    )]
    Timeout {
        /// The limit.
        timeout: Duration,
        /// The end of the console.
        tail: String,
        /// Whether the guest's `/init` said it started (`TIERD-VM: START`): when not, the
        /// kernel never got that far, and nothing of the run was tried.
        reached_init: bool,
    },
    /// The guest ran but did not do what was asked (no end marker, non-zero rc, a file
    /// missing).
    #[error("guest run failed: {reason}; last console lines:\n{tail}")]
    Guest {
        /// What is wrong.
        reason: String,
        /// The end of the console.
        tail: String,
    },
}
