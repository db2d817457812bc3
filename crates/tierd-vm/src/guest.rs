//! Running a guest: pick the accelerator, start qemu, collect the serial console, enforce a
//! timeout, and read back the `/init` end marker and any exported files.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::export::{decode_exports, strip_exports, ExportedFile};
use crate::initramfs::Initramfs;
use crate::kernel::Kernel;
use crate::spec::{Accel, GuestSpec};
use crate::Error;

/// The qemu binary (override with `TIERD_VM_QEMU`).
pub const QEMU: &str = "qemu-system-x86_64";
/// Environment variable forcing the accelerator (`tcg` or `kvm`).
pub const ACCEL_ENV: &str = "TIERD_VM_ACCEL";
/// Kernel arguments every run gets: serial console, few messages, a panic ends qemu, and an
/// Oops panics (`oops=panic`, Documentation/admin-guide/kernel-parameters.txt): without it an
/// Oops in process context kills that task and the kernel goes on, so a run could finish with
/// its server or its promoter dead and report what it measured as a result (seen in CI,
/// 2026-12-02: the memcached row placed 0 % after an Oops). A run whose kernel oopsed measured
/// nothing; it ends there, without its end marker, and says so ([`GuestOutput::rc`] `None`).
pub const BASE_APPEND: &str = "console=ttyS0 quiet panic=-1 oops=panic";
/// Boots of one run at most when a TCG guest dies of the emulator's fault
/// ([`emulator_int3_oops`]): the first and two more.
pub const MAX_BOOTS: u32 = 3;
/// The marker `/init` prints when `run.sh` returns.
pub const END_MARKER: &str = "TIERD-VM: END rc=";

/// A kernel plus a scratch directory: the convenient way to run guests from an
/// [`Initramfs`] without managing archive files.
#[derive(Debug, Clone)]
pub struct Guest {
    /// The kernel every run boots.
    pub kernel: Kernel,
    /// Where the per-run initramfs files are written (and removed again).
    pub work_dir: PathBuf,
}

static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Guest {
    /// A guest runner for `kernel`, writing temporary archives into `work_dir`.
    #[must_use]
    pub fn new(kernel: Kernel, work_dir: PathBuf) -> Self {
        Self { kernel, work_dir }
    }

    /// Fetches (or finds cached) the kernel in [`crate::default_cache_dir`] and uses that
    /// directory for scratch files too.
    ///
    /// # Errors
    /// Whatever [`Kernel::fetch`] returns.
    pub fn from_default_cache() -> Result<Self, Error> {
        let cache = crate::default_cache_dir();
        Ok(Self::new(Kernel::fetch(&cache)?, cache))
    }

    /// Builds the archive, boots `spec` with it and returns the output (see [`run`]).
    ///
    /// # Errors
    /// As [`run`], plus [`Error::Io`]/[`Error::Cpio`] for the archive.
    pub fn run(
        &self,
        spec: &GuestSpec,
        initramfs: &Initramfs,
        append_extra: &str,
        timeout: Duration,
    ) -> Result<GuestOutput, Error> {
        std::fs::create_dir_all(&self.work_dir).map_err(|source| Error::Io {
            path: self.work_dir.clone(),
            source,
        })?;
        let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = self
            .work_dir
            .join(format!("initramfs-{}-{n}.cpio.gz", std::process::id()));
        initramfs.write_gz(&path)?;
        let mut boots = 1;
        let mut res = loop {
            let res = run(spec, &self.kernel.vmlinux, &path, append_extra, timeout);
            // Boot again when the guest died of QEMU's, not the kernel's or the test's, fault.
            let Some(why) = emulator_fault(detect_accel(), &res) else {
                break res;
            };
            if boots >= MAX_BOOTS {
                break res;
            }
            eprintln!("tierd-vm: {why}; boot {} of at most {MAX_BOOTS}", boots + 1);
            boots += 1;
        };
        if let Ok(o) = &mut res {
            o.reboots = boots - 1;
        }
        let _ = std::fs::remove_file(&path);
        res
    }
}

/// Whether a TCG guest died of an `Oops: int3`: a kernel breakpoint trap that the kernel's
/// own int3 handler did not claim. The kernel patches its text at run time (jump labels,
/// static calls: arch/x86/kernel/alternative.c `text_poke_bp_batch()`) by writing an int3,
/// then the new bytes, then removing the int3, with `poke_int3_handler()` claiming the trap
/// of a CPU that meets the int3 meanwhile and an IPI to every CPU between the steps. Seen
/// once in the test command (7.3 guest at boot, 2026-12-02, `Oops: int3` in `sched_clock_cpu`
/// from the timer interrupt of an idle vCPU), the `Code:` dump showing the patched bytes, not
/// an int3, at the faulting address: the vCPU executed code already rewritten, which points at
/// the emulator (QEMU's multi-threaded TCG) rather than the kernel or the test. It says nothing
/// about the workload, so the guest is booted again, once; never with KVM.
#[must_use]
pub fn emulator_int3_oops(out: &GuestOutput) -> bool {
    out.rc.is_none_or(|rc| rc != 0) && tcg_int3_oops(out.accel, &out.console)
}

/// The console of a TCG guest shows an int3 Oops (the finished run's console, or a timed-out
/// run's tail).
fn tcg_int3_oops(accel: Accel, console: &str) -> bool {
    accel == Accel::Tcg && console.contains("Oops: int3")
}

/// What `/init` prints first ([`crate::initramfs::INIT_SCRIPT`]), once the kernel has booted.
const INIT_STARTED: &str = "TIERD-VM: START";

/// Why a run under `accel` died of the emulator rather than of the kernel or the test, if it
/// did: a TCG guest that met an int3 the kernel had already patched away
/// ([`emulator_int3_oops`]), or a TCG guest that timed out without its `/init` ever saying it
/// started. The second was seen once in the test command (2026-12-04, a 7.3 guest of
/// experiment A, two guests running on the 2-core host): nothing at all on the console in
/// 390 s, where a boot takes well under a minute there, so the kernel hung before it reached
/// `/init` and printed nothing (`quiet`), as a vCPU spinning on emulated code would. A boot
/// that never started the test says nothing about the test, so it is booted again, as after
/// the int3 Oops; never with KVM, and a hang after `/init` started stays the test's failure.
fn emulator_fault(accel: Accel, res: &Result<GuestOutput, Error>) -> Option<&'static str> {
    const INT3: &str = "the guest died of an `Oops: int3` under TCG (a breakpoint the kernel's \
                        live patching had already removed, executed by another vCPU)";
    match res {
        Ok(out) if emulator_int3_oops(out) => Some(INT3),
        Err(Error::Timeout { tail, .. }) if tcg_int3_oops(accel, tail) => Some(INT3),
        Err(Error::Timeout {
            reached_init: false,
            ..
        }) if accel == Accel::Tcg => Some(
            "the guest's kernel never reached /init under TCG before the timeout (a hung boot)",
        ),
        _ => None,
    }
}

/// What a finished guest run produced.
#[derive(Debug, Clone)]
pub struct GuestOutput {
    /// The console (kernel and `/init` output) with the export framing replaced by
    /// `[exported NAME]` lines.
    pub console: String,
    /// `run.sh`'s exit status from the end marker; `None` when the guest did not get there
    /// (a panic, or `/init` failing).
    pub rc: Option<i32>,
    /// Wall time from starting qemu to its exit.
    pub wall: Duration,
    /// The accelerator used.
    pub accel: Accel,
    /// qemu's exit status, as text.
    pub qemu_status: String,
    /// qemu's stderr.
    pub qemu_stderr: String,
    /// Files the guest exported with `tierd_export`/`tierd_export_tree`.
    pub files: Vec<ExportedFile>,
    /// Boots repeated because the one before died of the emulator's fault
    /// ([`emulator_int3_oops`], or a TCG boot that never reached `/init`).
    pub reboots: u32,
}

impl GuestOutput {
    /// The exported file called `name`.
    #[must_use]
    pub fn file(&self, name: &str) -> Option<&ExportedFile> {
        self.files.iter().find(|f| f.name == name)
    }

    /// The run reached the end of its script (`/init` printed the end marker, whatever
    /// `run.sh` returned); a guest whose kernel panicked or oopsed ([`BASE_APPEND`]) did not,
    /// and what it printed before is no measurement.
    ///
    /// # Errors
    /// [`Error::Guest`] with the kernel's last words (the Oops or panic line when there is
    /// one) and the console's tail.
    pub fn require_finished(&self) -> Result<(), Error> {
        if self.rc.is_some() {
            return Ok(());
        }
        let why = self
            .console
            .lines()
            .find(|l| l.contains("Oops: ") || l.contains("Kernel panic") || l.contains("BUG: "))
            .map_or_else(
                || "no end marker".to_owned(),
                |l| l.trim().trim_end_matches('\r').to_owned(),
            );
        Err(Error::Guest {
            reason: format!("the guest did not reach the end of its script ({why})"),
            tail: tail(&self.console, 40),
        })
    }
}

/// Whether the host CPU flags (a `/proc/cpuinfo` text) include hardware virtualization.
#[must_use]
pub fn cpuinfo_has_hw_virt(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
}

/// Picks KVM only when `/dev/kvm` opens read-write *and* the CPU has `vmx`/`svm`.
/// A `/dev/kvm` without those flags is a software hypervisor such as kvm-pvm, which cannot
/// run stock kernels (docs/lab.md, first guest runs, 2). `TIERD_VM_ACCEL=tcg|kvm` overrides.
#[must_use]
pub fn detect_accel() -> Accel {
    match std::env::var(ACCEL_ENV).as_deref() {
        Ok("tcg") => return Accel::Tcg,
        Ok("kvm") => return Accel::Kvm,
        _ => {}
    }
    let kvm_opens = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    let hw = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| cpuinfo_has_hw_virt(&c));
    if kvm_opens && hw {
        Accel::Kvm
    } else {
        Accel::Tcg
    }
}

/// The exit status in the last end marker of a console.
#[must_use]
pub fn parse_end_marker(console: &str) -> Option<i32> {
    console.lines().rev().find_map(|l| {
        let rest = &l[l.find(END_MARKER)? + END_MARKER.len()..];
        let num: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        num.parse().ok()
    })
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

fn qemu_program() -> String {
    std::env::var("TIERD_VM_QEMU").unwrap_or_else(|_| QEMU.to_owned())
}

/// Whether qemu can be started at all (for skip decisions).
#[must_use]
pub fn qemu_available() -> bool {
    Command::new(qemu_program())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs one guest to completion.
///
/// `initramfs` is a gzip'd cpio file (see [`crate::Initramfs::write_gz`]); `append_extra`
/// is added to [`BASE_APPEND`] (e.g. `KEY=VALUE` words for `run.sh`).
///
/// # Errors
/// [`Error::Spawn`] when qemu cannot start, [`Error::Timeout`] (qemu is killed) with the
/// console tail, [`Error::Export`] when an exported file is damaged, [`Error::Spec`].
pub fn run(
    spec: &GuestSpec,
    kernel: &Path,
    initramfs: &Path,
    append_extra: &str,
    timeout: Duration,
) -> Result<GuestOutput, Error> {
    let accel = detect_accel();
    let append = if append_extra.is_empty() {
        BASE_APPEND.to_owned()
    } else {
        format!("{BASE_APPEND} {append_extra}")
    };
    let args = spec.qemu_args(accel, kernel, initramfs, &append)?;
    let program = qemu_program();
    let start = Instant::now();
    let mut child = Command::new(&program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn {
            program: program.clone(),
            source,
        })?;
    let console = Arc::new(Mutex::new(Vec::<u8>::new()));
    let reader = child.stdout.take().map(|mut out| {
        let sink = Arc::clone(&console);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut c) = sink.lock() {
                    c.extend_from_slice(&buf[..n]);
                }
            }
        })
    });
    let err_reader = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = err.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => {}
            Err(source) => return Err(Error::Spawn { program, source }),
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            if let Some(r) = reader {
                let _ = r.join();
            }
            let text = console
                .lock()
                .map(|c| String::from_utf8_lossy(&c).into_owned())
                .unwrap_or_default();
            return Err(Error::Timeout {
                timeout,
                tail: tail(&strip_exports(&text), 40),
                reached_init: text.contains(INIT_STARTED),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall = start.elapsed();
    if let Some(r) = reader {
        let _ = r.join();
    }
    let qemu_stderr = err_reader.and_then(|h| h.join().ok()).unwrap_or_default();
    let raw = console
        .lock()
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .unwrap_or_default();
    let files = decode_exports(&raw)?;
    Ok(GuestOutput {
        reboots: 0,
        console: strip_exports(&raw),
        rc: parse_end_marker(&raw),
        wall,
        accel,
        qemu_status: status.to_string(),
        qemu_stderr,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_tcg_run_with_an_int3_oops_is_booted_again() {
        let out = |accel, rc, console: &str| GuestOutput {
            console: console.into(),
            rc,
            wall: Duration::ZERO,
            accel,
            qemu_status: String::new(),
            qemu_stderr: String::new(),
            files: Vec::new(),
            reboots: 0,
        };
        let oops = "[    2.204203] Oops: int3: 0000 [#1] SMP NOPTI\n";
        assert!(emulator_int3_oops(&out(Accel::Tcg, None, oops)));
        assert!(emulator_int3_oops(&out(Accel::Tcg, Some(1), oops)));
        // The test finished: nothing to redo.
        assert!(!emulator_int3_oops(&out(Accel::Tcg, Some(0), oops)));
        // Another Oops is the kernel's or the workload's, and KVM runs the code itself.
        assert!(!emulator_int3_oops(&out(
            Accel::Tcg,
            None,
            "Oops: general protection fault"
        )));
        assert!(!emulator_int3_oops(&out(Accel::Kvm, None, oops)));
    }

    #[test]
    fn a_tcg_boot_that_never_reached_init_is_booted_again() {
        let timeout = |console: &str| -> Result<GuestOutput, Error> {
            Err(Error::Timeout {
                timeout: Duration::from_secs(390),
                tail: console.into(),
                reached_init: console.contains(INIT_STARTED),
            })
        };
        // Nothing on the console: the kernel hung before /init.
        assert!(emulator_fault(Accel::Tcg, &timeout("")).is_some());
        let e = timeout("").unwrap_err().to_string();
        assert!(e.contains("never reached /init"), "{e}");
        // /init started: the hang is the run's, and so is the failure.
        let started = "TIERD-VM: START kernel=7.3.4 uptime=21.5\nLAB T1 start\n";
        assert!(emulator_fault(Accel::Tcg, &timeout(started)).is_none());
        assert!(!timeout(started)
            .unwrap_err()
            .to_string()
            .contains("never reached"));
        // KVM runs the guest's code itself: no emulator to blame.
        assert!(emulator_fault(Accel::Kvm, &timeout("")).is_none());
        // The int3 Oops of a timed-out run, after /init started, is still the emulator's.
        let oops = "TIERD-VM: START kernel=7.3.4\n[ 40.1] Oops: int3: 0000 [#1] SMP NOPTI\n";
        assert!(emulator_fault(Accel::Tcg, &timeout(oops)).is_some());
        // Other errors are not retried.
        assert!(emulator_fault(Accel::Tcg, &Err(Error::Spec("x".into()))).is_none());
    }

    #[test]
    fn a_guest_without_its_end_marker_is_an_error_naming_the_oops() {
        let out = |rc, console: &str| GuestOutput {
            console: console.into(),
            rc,
            wall: Duration::ZERO,
            accel: Accel::Tcg,
            qemu_status: String::new(),
            qemu_stderr: String::new(),
            files: Vec::new(),
            reboots: 0,
        };
        let console = "LAB START 10.0\n[   40.1] Oops: int3: 0000 [#1] SMP NOPTI\n\
                       [   40.2] Kernel panic - not syncing: Fatal exception\n";
        let e = out(None, console)
            .require_finished()
            .unwrap_err()
            .to_string();
        assert!(e.contains("did not reach the end"), "{e}");
        assert!(e.contains("Oops: int3"), "{e}");
        assert!(e.contains("Kernel panic"), "the tail is kept: {e}");
        let e = out(None, "LAB START 1\n").require_finished().unwrap_err();
        assert!(e.to_string().contains("no end marker"), "{e}");
        // A script that failed still finished: its rc is the script's to judge.
        assert!(out(Some(1), console).require_finished().is_ok());
        assert!(out(Some(0), "").require_finished().is_ok());
    }

    #[test]
    fn hw_virt_needs_vmx_or_svm_in_flags() {
        assert!(cpuinfo_has_hw_virt(
            "processor : 0\nflags\t\t: fpu vme svm lm\n"
        ));
        assert!(cpuinfo_has_hw_virt("flags : fpu vmx\n"));
        // a PVM host: /dev/kvm exists but the flags lack both
        assert!(!cpuinfo_has_hw_virt(
            "flags\t\t: fpu vme hypervisor lm svm_lock\n"
        ));
        assert!(!cpuinfo_has_hw_virt("model name : vmx svm\n"));
    }

    #[test]
    fn end_marker_gives_the_last_rc() {
        assert_eq!(
            parse_end_marker("x\r\nTIERD-VM: END rc=0 uptime=3.1\r\n"),
            Some(0)
        );
        assert_eq!(
            parse_end_marker("TIERD-VM: END rc=1\nTIERD-VM: END rc=42 uptime=1\n"),
            Some(42)
        );
        assert_eq!(
            parse_end_marker("[ 1.2] Kernel panic - not syncing\n"),
            None
        );
    }
}
