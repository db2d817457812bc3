//! `tierd-vm`: command-line front end of the guest harness.
//!
//! * `tierd-vm [--kernel 6.12|newest] fetch-kernel` downloads (or finds in the cache) a kernel.
//! * `tierd-vm run --script run.sh [--file HOST:GUEST]... [--three-node] [--timeout S]`
//!   boots a guest, prints its console and writes exported files to `--out`.
//! * `tierd-vm capture-fixtures --out DIR` captures real `/proc` and `/sys` files.
//! * `tierd-vm capture-folio-fixtures --out DIR` captures a THP and hugetlb process's smaps,
//!   pagemap and kpageflags slices (crates/tierd-vm/src/fixtures.rs).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tierd_vm::{
    default_cache_dir, fixtures, initramfs::DEFAULT_BUSYBOX, GuestSpec, Initramfs, Kernel,
    KernelChoice,
};

#[derive(Parser, Debug)]
#[command(
    name = "tierd-vm",
    about = "Boot a tiered-memory QEMU guest with a stock Debian kernel (6.12 or the newest)"
)]
struct Cli {
    /// Cache directory for the kernel (default: $TIERD_VM_CACHE or target/vmlab).
    #[arg(long, global = true)]
    cache: Option<PathBuf>,
    /// The guest kernel: `6.12` (bookworm-backports) or `newest` (the newest in Debian's
    /// archive); default $TIERD_LAB_KERNEL, else newest.
    #[arg(long, global = true)]
    kernel: Option<KernelChoice>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Download and decompress the kernel (no-op when cached); prints its path and version.
    FetchKernel,
    /// Boot a guest running a script as /lab/run.sh.
    Run {
        /// The script run inside the guest (busybox sh; `tierd_export FILE` exports a file).
        #[arg(long)]
        script: PathBuf,
        /// Extra files, `HOST_PATH:GUEST_PATH` (host permissions are kept).
        #[arg(long = "file")]
        files: Vec<String>,
        /// Three nodes (two DRAM sockets and a CPU-less slow node) instead of two.
        #[arg(long)]
        three_node: bool,
        /// Seconds before qemu is killed.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Extra kernel command line words (`KEY=VALUE` reach the script's environment).
        #[arg(long, default_value = "")]
        append: String,
        /// Directory for files the guest exports.
        #[arg(long)]
        out: Option<PathBuf>,
        /// busybox binary to put into the guest.
        #[arg(long, default_value = DEFAULT_BUSYBOX)]
        busybox: PathBuf,
    },
    /// Capture /proc and /sys fixtures from the two-node guest into DIR.
    CaptureFixtures {
        /// Output directory (its proc/, sys/ and meta/ are replaced).
        #[arg(long)]
        out: PathBuf,
        /// Seconds before qemu is killed.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// Capture THP and hugetlb folio fixtures (smaps, pagemap and kpageflags slices) of a
    /// `tierd-workload folios` process into DIR.
    CaptureFolioFixtures {
        /// Output directory (its proc/, sys/ and meta/ are replaced).
        #[arg(long)]
        out: PathBuf,
        /// A static tierd-workload (default: built with `cargo build` under target/guest).
        #[arg(long)]
        workload: Option<PathBuf>,
        /// Seconds before qemu is killed.
        #[arg(long, default_value_t = 400)]
        timeout: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tierd-vm: {e}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(cli: Cli) -> Result<ExitCode, tierd_vm::Error> {
    let cache = cli.cache.unwrap_or_else(default_cache_dir);
    let t = Instant::now();
    let choice = match cli.kernel {
        Some(k) => k,
        None => KernelChoice::from_env()?,
    };
    let kernel = Kernel::fetch_choice(&cache, choice)?;
    let fetch = t.elapsed();
    match cli.cmd {
        Cmd::FetchKernel => {
            println!(
                "{}\t{}\t({:.1} s)",
                kernel.version,
                kernel.vmlinux.display(),
                fetch.as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            script,
            files,
            three_node,
            timeout,
            append,
            out,
            busybox,
        } => {
            let text = std::fs::read_to_string(&script).map_err(|source| tierd_vm::Error::Io {
                path: script.clone(),
                source,
            })?;
            let t = Instant::now();
            let mut fs = Initramfs::standard(&busybox, &text)?;
            for f in &files {
                let (host, guest) =
                    f.split_once(':')
                        .ok_or_else(|| tierd_vm::Error::BadGuestPath {
                            path: f.clone(),
                            reason: "--file wants HOST_PATH:GUEST_PATH",
                        })?;
                fs.add_host_file(std::path::Path::new(host), guest, None)?;
            }
            std::fs::create_dir_all(&cache).map_err(|source| tierd_vm::Error::Io {
                path: cache.clone(),
                source,
            })?;
            let initrd = fs.write_gz(&cache.join(format!("run-{}.cpio.gz", std::process::id())))?;
            let build = t.elapsed();
            let spec = if three_node {
                GuestSpec::three_node()
            } else {
                GuestSpec::two_node()
            };
            let res = tierd_vm::run(
                &spec,
                &kernel.vmlinux,
                &initrd,
                &append,
                Duration::from_secs(timeout),
            );
            let _ = std::fs::remove_file(&initrd);
            let o = res?;
            print!("{}", o.console);
            if let Some(dir) = out {
                for f in &o.files {
                    let p = f.write_under(&dir)?;
                    eprintln!("tierd-vm: wrote {}", p.display());
                }
            }
            eprintln!(
                "tierd-vm: kernel {} accel {} initramfs {:.2} s, run {:.1} s, qemu {}, rc {:?}",
                kernel.version,
                o.accel,
                build.as_secs_f64(),
                o.wall.as_secs_f64(),
                o.qemu_status,
                o.rc
            );
            if !o.qemu_stderr.trim().is_empty() {
                eprintln!("tierd-vm: qemu stderr: {}", o.qemu_stderr.trim());
            }
            Ok(match o.rc {
                Some(0) => ExitCode::SUCCESS,
                _ => ExitCode::FAILURE,
            })
        }
        Cmd::CaptureFolioFixtures {
            out,
            workload,
            timeout,
        } => {
            let workload = match workload {
                Some(w) => w,
                None => {
                    let ws = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
                    tierd_vm::binaries::build_static(&ws, &["tierd-workload"])?
                        .join("tierd-workload")
                }
            };
            let cap = fixtures::capture_folios(
                &kernel,
                &workload,
                &out,
                &cache,
                Duration::from_secs(timeout),
            )?;
            print!("{}", cap.output.console);
            eprintln!(
                "tierd-vm: {} files in {}; kernel {}, guest {:.1} s ({})",
                cap.files.len(),
                out.display(),
                kernel.version,
                cap.output.wall.as_secs_f64(),
                cap.output.accel
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::CaptureFixtures { out, timeout } => {
            let cap = fixtures::capture(&kernel, &out, &cache, Duration::from_secs(timeout))?;
            print!("{}", cap.output.console);
            eprintln!(
                "tierd-vm: {} files, {} symlinks ({} dropped) in {}; kernel {} ({:.1} s fetch), initramfs {:.2} s, guest {:.1} s ({})",
                cap.files.len(),
                cap.symlinks.len(),
                cap.dropped_symlinks.len(),
                out.display(),
                kernel.version,
                fetch.as_secs_f64(),
                cap.initramfs_build.as_secs_f64(),
                cap.output.wall.as_secs_f64(),
                cap.output.accel
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
