//! # sys: the project's only `unsafe` code — thin, typed wrappers over the NUMA syscalls
//!
//! Everything here is a direct call into the kernel with the arguments checked first, and the
//! result turned into a [`SysError`] that names what failed (pid, address, errno). No policy
//! lives here; the mover ([`crate::mover`]) and the workload build on these wrappers.
//!
//! The syscalls and their ABI (include/uapi/linux/mempolicy.h, mm/mempolicy.c, mm/migrate.c):
//!
//! - `move_pages(pid, count, pages[], nodes[], status[], flags)`: with `nodes == NULL` a pure
//!   location query (`do_pages_stat()`), otherwise a migration (`do_pages_move()`). Per-page
//!   results land in `status[]` (node, or `-errno`); the return value is 0, the number of pages
//!   the kernel gave up on (`move_pages_and_store_status()`), or `-errno` for the whole call.
//! - `mbind(addr, len, mode, nodemask, maxnode, flags)` and `set_mempolicy(mode, nodemask,
//!   maxnode)`: the kernel's `get_nodes()` decrements `maxnode` before reading the mask (a
//!   historical off-by-one that libnuma also works around), so a 64-bit mask is passed with
//!   `maxnode = 65`.
//! - `get_mempolicy(mode*, nodemask*, maxnode, addr, flags)`: `maxnode` must be at least the
//!   kernel's `nr_node_ids` (`kernel_get_mempolicy()`), so the thread-policy query passes a
//!   buffer for `MAX_NUMNODES` (1024 on x86-64) bits.
//!
//! [`AnonMapping`] owns an anonymous private mapping so that callers (the guest workload) can
//! bind, touch and chase memory without any `unsafe` of their own.

use std::io;

use thiserror::Error;
use tierd_engine::types::NodeMask;

/// `MPOL_DEFAULT` (include/uapi/linux/mempolicy.h `enum { MPOL_DEFAULT, ... }`).
pub const MPOL_DEFAULT: i32 = 0;
/// `MPOL_PREFERRED`.
pub const MPOL_PREFERRED: i32 = 1;
/// `MPOL_BIND`.
pub const MPOL_BIND: i32 = 2;
/// `MPOL_INTERLEAVE`.
pub const MPOL_INTERLEAVE: i32 = 3;
/// `MPOL_LOCAL`.
pub const MPOL_LOCAL: i32 = 4;
/// `MPOL_PREFERRED_MANY` (5.15+).
pub const MPOL_PREFERRED_MANY: i32 = 5;
/// `MPOL_WEIGHTED_INTERLEAVE` (6.9+).
pub const MPOL_WEIGHTED_INTERLEAVE: i32 = 6;

/// Mode flag `MPOL_F_NUMA_BALANCING` (1 << 13): let NUMA balancing (and memory tiering
/// promotion) act on a `MPOL_BIND` / `MPOL_PREFERRED_MANY` range (`MPOL_BIND` since 5.12, `MPOL_PREFERRED_MANY` since 6.10, commit 133d04b1eee9).
pub const MPOL_F_NUMA_BALANCING: i32 = 1 << 13;
/// Mode flag `MPOL_F_RELATIVE_NODES`.
pub const MPOL_F_RELATIVE_NODES: i32 = 1 << 14;
/// Mode flag `MPOL_F_STATIC_NODES`.
pub const MPOL_F_STATIC_NODES: i32 = 1 << 15;

/// `get_mempolicy` flag `MPOL_F_NODE`: return a node id instead of the policy.
pub const MPOL_F_NODE: u32 = 1 << 0;
/// `get_mempolicy` flag `MPOL_F_ADDR`: look up the policy (or node) of an address.
pub const MPOL_F_ADDR: u32 = 1 << 1;
/// `get_mempolicy` flag `MPOL_F_MEMS_ALLOWED`.
pub const MPOL_F_MEMS_ALLOWED: u32 = 1 << 2;

/// `mbind`/`move_pages` flag `MPOL_MF_STRICT`: fail if existing pages do not follow the policy.
pub const MPOL_MF_STRICT: u32 = 1 << 0;
/// `MPOL_MF_MOVE`: move pages mapped only by this process.
pub const MPOL_MF_MOVE: u32 = 1 << 1;
/// `MPOL_MF_MOVE_ALL`: move shared pages too (needs `CAP_SYS_NICE`).
pub const MPOL_MF_MOVE_ALL: u32 = 1 << 2;

/// Bits in the kernel's largest nodemask on x86-64 (`CONFIG_NODES_SHIFT` = 10). Used to size the
/// buffer `get_mempolicy` writes to.
const MAX_NUMNODES: usize = 1024;

/// A failed system call, with what it was asked to do.
#[derive(Debug, Error)]
pub enum SysError {
    /// `move_pages(2)` failed as a whole.
    #[error("move_pages(pid {pid}, {count} pages from {first_addr:#x}) failed: {source}")]
    MovePages {
        /// Target process (0 = self).
        pid: i32,
        /// Pages in the call.
        count: usize,
        /// The first address of the call.
        first_addr: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `mbind(2)` failed.
    #[error("mbind({addr:#x}, {len} bytes, mode {mode:#x}, nodes {nodes:#x}) failed: {source}")]
    Mbind {
        /// Range start.
        addr: usize,
        /// Range length.
        len: usize,
        /// Mode with mode flags.
        mode: i32,
        /// The node mask.
        nodes: u64,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `set_mempolicy(2)` failed.
    #[error("set_mempolicy(mode {mode:#x}, nodes {nodes:#x}) failed: {source}")]
    SetMempolicy {
        /// Mode with mode flags.
        mode: i32,
        /// The node mask.
        nodes: u64,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `get_mempolicy(2)` failed.
    #[error("get_mempolicy(addr {addr:?}, flags {flags:#x}) failed: {source}")]
    GetMempolicy {
        /// The address asked about, if any.
        addr: Option<usize>,
        /// The flags.
        flags: u32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `mmap(2)` failed.
    #[error("mmap of {len} anonymous bytes failed: {source}")]
    Mmap {
        /// Requested length.
        len: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `mmap(2)` of a file failed.
    #[error("mmap of {len} bytes of a file (fd {fd}) failed: {source}")]
    MmapFile {
        /// Requested length.
        len: usize,
        /// The file descriptor.
        fd: i32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `madvise(2)` failed.
    #[error("madvise({addr:#x}, {len} bytes) failed: {source}")]
    Madvise {
        /// Range start.
        addr: usize,
        /// Range length.
        len: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `munmap(2)` of part of a mapping failed.
    #[error("munmap({addr:#x}, {len} bytes) failed: {source}")]
    Munmap {
        /// Range start.
        addr: usize,
        /// Range length.
        len: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `mprotect(2)` failed.
    #[error("mprotect({addr:#x}, {len} bytes, prot {prot:#x}) failed: {source}")]
    Mprotect {
        /// Range start.
        addr: usize,
        /// Range length.
        len: usize,
        /// The protection asked for.
        prot: i32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `sched_setaffinity(2)` failed.
    #[error("sched_setaffinity(pid {pid}, cpu {cpu}) failed: {source}")]
    Affinity {
        /// Target (0 = calling thread).
        pid: i32,
        /// The CPU.
        cpu: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// The arguments were inconsistent; nothing was called.
    #[error("invalid {call} arguments: {what}")]
    Invalid {
        /// The syscall.
        call: &'static str,
        /// What is wrong.
        what: String,
    },
}

impl SysError {
    /// The errno of a failed call (`None` for [`SysError::Invalid`]).
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        match self {
            SysError::MovePages { source, .. }
            | SysError::Mbind { source, .. }
            | SysError::SetMempolicy { source, .. }
            | SysError::GetMempolicy { source, .. }
            | SysError::Mmap { source, .. }
            | SysError::MmapFile { source, .. }
            | SysError::Madvise { source, .. }
            | SysError::Munmap { source, .. }
            | SysError::Mprotect { source, .. }
            | SysError::Affinity { source, .. } => source.raw_os_error(),
            SysError::Invalid { .. } => None,
        }
    }
}

/// The base page size (`sysconf(_SC_PAGESIZE)`), 4096 on x86-64.
#[must_use]
pub fn page_size() -> usize {
    // SAFETY: sysconf only reads a constant of the C library; no memory is passed.
    let r = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(r).unwrap_or(4096)
}

/// CPU time the calling thread has used (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`): user and
/// system time, in nanoseconds of the thread's own clock (kernel/time/posix-cpu-timers.c).
/// Unlike wall time it leaves out the time a thread waits (a DAMON sysfs write that blocks
/// until kdamond answers, a sleep), so the daemon can tell where its CPU goes. Zero if the
/// clock cannot be read (it always can on Linux 2.6.12+).
#[must_use]
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the kernel writes one `struct timespec` into `ts`, a live local of that type;
    // nothing else is read or written.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    if r != 0 {
        return std::time::Duration::ZERO;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0);
    std::time::Duration::new(secs, nanos)
}

/// Gives SIGPIPE back its default action (end the process), which the Rust runtime sets to
/// "ignore" before `main`. With it, a command whose reader went away (`tierd compare | head
/// -1`) ends at its next write to the pipe, silently and with the status the shell reports as
/// 141 (128 + SIGPIPE), like `cat`, `grep` and the other command-line tools; without it every
/// `println!` after the reader left panics with "Broken pipe". Only for commands that write
/// to pipes nothing but their output: a daemon must not die because its log reader did.
///
/// # Errors
/// The OS error when `signal(2)` refuses (it does not for SIGPIPE).
pub fn default_sigpipe() -> io::Result<()> {
    // SAFETY: installs SIG_DFL, not a handler: no code of ours runs in signal context, and no
    // memory is passed. signal(2) is async-signal-safe and SIGPIPE is a valid signal number.
    let r = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if r == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A pidfd (`pidfd_open(2)`, Linux 5.3): a handle on one process that stays tied to it
/// after it exits, so a pid reused by another process is never mistaken for it.
///
/// # Errors
/// The OS error: `ESRCH` when no such process exists, `ENOSYS` on kernels before 5.3,
/// `EMFILE` when out of descriptors.
pub fn pidfd_open(pid: u32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags (0) and passes no memory; it returns a new
    // descriptor or -1 with errno set.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether the process behind a pidfd has exited: a pidfd polls readable once it has
/// (kernel/pid.c `pidfd_poll`). Never blocks.
///
/// # Errors
/// The OS error of `poll(2)` (`ENOMEM`, `EINTR`).
pub fn pidfd_exited(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1, timeout 0: the kernel writes `revents` only.
    let r = unsafe { libc::poll(&raw mut p, 1, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0)
}

/// `move_pages(2)`: move (`nodes = Some`) or locate (`nodes = None`) the pages at `addrs` in
/// process `pid` (0 = the caller). `status[i]` receives the page's node, or `-errno` for that
/// page (`-ENOENT` not present, `-EFAULT` not mapped, `-EBUSY`, `-ENOMEM`, `-EACCES`).
///
/// Returns the syscall's non-negative result: 0, or (moves only) the number of pages the kernel
/// did not migrate and whose `status` entries it did **not** write (mm/migrate.c
/// `move_pages_and_store_status()` returns early). Callers that need to know which pages those
/// were should prefill `status` with a value the kernel never writes (e.g. `i32::MIN`).
///
/// # Errors
/// [`SysError::Invalid`] when the slices differ in length or `flags` has bits other than
/// `MPOL_MF_MOVE`/`MPOL_MF_MOVE_ALL`; [`SysError::MovePages`] when the whole call fails
/// (`ESRCH` no such process, `EPERM` no ptrace access, `ENODEV` target node without memory,
/// `EACCES` node outside the target's cpuset, `EINVAL` the target has no mm).
pub fn move_pages(
    pid: i32,
    addrs: &[usize],
    nodes: Option<&[i32]>,
    status: &mut [i32],
    flags: u32,
) -> Result<usize, SysError> {
    if status.len() != addrs.len() {
        return Err(SysError::Invalid {
            call: "move_pages",
            what: format!(
                "{} addresses but {} status slots",
                addrs.len(),
                status.len()
            ),
        });
    }
    if let Some(n) = nodes {
        if n.len() != addrs.len() {
            return Err(SysError::Invalid {
                call: "move_pages",
                what: format!("{} addresses but {} target nodes", addrs.len(), n.len()),
            });
        }
    }
    if flags & !(MPOL_MF_MOVE | MPOL_MF_MOVE_ALL) != 0 {
        return Err(SysError::Invalid {
            call: "move_pages",
            what: format!("flags {flags:#x}"),
        });
    }
    if addrs.is_empty() {
        return Ok(0);
    }
    let nodes_ptr = nodes.map_or(std::ptr::null(), <[i32]>::as_ptr);
    // SAFETY: the kernel reads `addrs.len()` pointer-sized words from `addrs` and (if non-null)
    // as many ints from `nodes`, and writes `addrs.len()` ints to `status`; all three slices
    // are live and have exactly that length (checked above). The addresses themselves are
    // never dereferenced by us: the kernel looks each one up in the target's page tables
    // (`vma_lookup()` / `follow_page()`) and reports unmapped ones as -EFAULT in `status`, so
    // passing addresses of another process, or stale ones, cannot touch our memory. `usize`
    // has the size of `void *` on every Linux target.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            libc::c_long::from(pid),
            addrs.len(),
            addrs.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            libc::c_long::from(flags),
        )
    };
    if r < 0 {
        return Err(SysError::MovePages {
            pid,
            count: addrs.len(),
            first_addr: addrs[0],
            source: io::Error::last_os_error(),
        });
    }
    Ok(usize::try_from(r).unwrap_or(0))
}

/// `mbind(2)` on `[addr, addr + len)`: `mode` is an `MPOL_*` mode, optionally or-ed with mode
/// flags (`MPOL_F_NUMA_BALANCING`, ...); `flags` are `MPOL_MF_*`. An empty `nodes` passes a NULL
/// mask (what `MPOL_DEFAULT` and `MPOL_LOCAL` require).
///
/// Binding only names an address range; it is sound for any range, mapped or not, because the
/// kernel validates it (`EFAULT` for holes, `EINVAL` for misalignment).
///
/// # Errors
/// [`SysError::Mbind`] with the kernel's errno.
pub fn mbind(
    addr: usize,
    len: usize,
    mode: i32,
    nodes: NodeMask,
    flags: u32,
) -> Result<(), SysError> {
    let mask: u64 = nodes.0;
    let (mask_ptr, maxnode): (*const u64, libc::c_ulong) = if nodes.is_empty() {
        (std::ptr::null(), 0)
    } else {
        (&raw const mask, 65)
    };
    // SAFETY: the kernel reads one u64 (BITS_TO_LONGS(maxnode - 1) = 1 word) from `mask_ptr`,
    // which points at a live local (or is NULL with maxnode 0). `addr`/`len` only name a range
    // of our address space; the kernel checks it and changes only the policy (and, with
    // MPOL_MF_MOVE, the physical placement) of that range, never its contents.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            libc::c_long::from(mode),
            mask_ptr,
            maxnode,
            libc::c_long::from(flags),
        )
    };
    if r != 0 {
        return Err(SysError::Mbind {
            addr,
            len,
            mode,
            nodes: mask,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// `set_mempolicy(2)` for the calling thread.
///
/// # Errors
/// [`SysError::SetMempolicy`] with the kernel's errno.
pub fn set_mempolicy(mode: i32, nodes: NodeMask) -> Result<(), SysError> {
    let mask: u64 = nodes.0;
    let (mask_ptr, maxnode): (*const u64, libc::c_ulong) = if nodes.is_empty() {
        (std::ptr::null(), 0)
    } else {
        (&raw const mask, 65)
    };
    // SAFETY: the kernel reads one u64 from `mask_ptr` (a live local, or NULL with maxnode 0)
    // and changes only the calling thread's allocation policy.
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            libc::c_long::from(mode),
            mask_ptr,
            maxnode,
        )
    };
    if r != 0 {
        return Err(SysError::SetMempolicy {
            mode,
            nodes: mask,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The calling thread's policy (`get_mempolicy(&mode, mask, MAX_NUMNODES, 0, 0)`): the mode
/// (with mode flags) and the node mask. With `addr = Some(a)` (`MPOL_F_ADDR`), the policy of the
/// VMA containing `a` instead.
///
/// # Errors
/// [`SysError::GetMempolicy`] with the kernel's errno; [`SysError::Invalid`] if the kernel
/// reports a node above 63, which [`NodeMask`] cannot hold.
pub fn get_mempolicy(addr: Option<usize>) -> Result<(i32, NodeMask), SysError> {
    let flags = if addr.is_some() { MPOL_F_ADDR } else { 0 };
    let mut mode: libc::c_int = 0;
    let mut mask = [0u64; MAX_NUMNODES / 64];
    // SAFETY: the kernel writes one int to `mode` and at most ALIGN(maxnode - 1, 64) / 8 =
    // 128 bytes to `mask` (`copy_nodes_to_user()`), which is exactly `mask`'s size. `addr` is
    // only looked up in our VMA tree, never dereferenced (MPOL_F_NODE is not set, so no page
    // is faulted in).
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &raw mut mode,
            mask.as_mut_ptr(),
            MAX_NUMNODES as libc::c_ulong,
            addr.unwrap_or(0),
            libc::c_ulong::from(flags),
        )
    };
    if r != 0 {
        return Err(SysError::GetMempolicy {
            addr,
            flags,
            source: io::Error::last_os_error(),
        });
    }
    if mask[1..].iter().any(|w| *w != 0) {
        return Err(SysError::Invalid {
            call: "get_mempolicy",
            what: "policy names nodes above 63".to_owned(),
        });
    }
    Ok((mode, NodeMask(mask[0])))
}

/// The node of the page at `addr` in the caller's address space
/// (`get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`). Note that the kernel *faults the page in* (as
/// a read) if it is not present (mm/mempolicy.c `lookup_node()`), so this is not a passive
/// query; use [`move_pages`] with `nodes = None` for that, and for other processes.
///
/// # Errors
/// [`SysError::GetMempolicy`] with the kernel's errno (`EFAULT` for an unmapped address).
pub fn node_of_addr(addr: usize) -> Result<i32, SysError> {
    let flags = MPOL_F_NODE | MPOL_F_ADDR;
    let mut node: libc::c_int = -1;
    // SAFETY: the kernel writes one int to `node`; the mask pointer is NULL (maxnode 0).
    // `addr` is resolved by the kernel in our page tables (`get_user_pages_fast()`), which
    // faults it in or fails with EFAULT; we never dereference it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &raw mut node,
            std::ptr::null_mut::<u64>(),
            0 as libc::c_ulong,
            addr,
            libc::c_ulong::from(flags),
        )
    };
    if r != 0 {
        return Err(SysError::GetMempolicy {
            addr: Some(addr),
            flags,
            source: io::Error::last_os_error(),
        });
    }
    Ok(node)
}

/// `migrate_pages(2)`: move every page of process `pid` (0 = the caller) that sits on a
/// node of `from` to the node of `to` at the same position in the mask (mm/mempolicy.c
/// `do_migrate_pages()`), as numactl's `migratepages PID FROM TO` does through libnuma's
/// `numa_migrate_pages()`. Returns the pages that could not be moved.
///
/// # Errors
/// The kernel's errno (`ESRCH`, `EPERM` without `CAP_SYS_NICE` for another user's process,
/// `EINVAL` for a node that has no memory).
pub fn migrate_pages(pid: u32, from: NodeMask, to: NodeMask) -> io::Result<u64> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let (old, new): (u64, u64) = (from.0, to.0);
    // SAFETY: the kernel reads one u64 (BITS_TO_LONGS(maxnode - 1) = 1 word for maxnode 65)
    // from each of `old` and `new`, live locals; no other memory is passed. It changes only
    // the physical placement of the target's pages, never their contents.
    let r = unsafe {
        libc::syscall(
            libc::SYS_migrate_pages,
            pid,
            65 as libc::c_ulong,
            &raw const old,
            &raw const new,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::try_from(r).unwrap_or(0))
}

/// Send SIGTERM to process `pid` (`kill(2)`).
///
/// # Errors
/// The kernel's errno (`ESRCH` for a process that is gone, `EPERM`).
pub fn sigterm(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    if pid <= 0 {
        // kill(0) or a negative pid would signal a whole process group.
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: kill passes no memory; `pid` names one process (> 0, checked above).
    let r = unsafe { libc::kill(pid, libc::SIGTERM) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pin thread/process `pid` (0 = the calling thread) to one CPU.
///
/// # Errors
/// [`SysError::Affinity`] (e.g. `EINVAL` for a CPU that is not online or allowed);
/// [`SysError::Invalid`] for a CPU beyond `CPU_SETSIZE`.
pub fn pin_to_cpu(pid: i32, cpu: usize) -> Result<(), SysError> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(SysError::Invalid {
            call: "sched_setaffinity",
            what: format!("cpu {cpu} >= CPU_SETSIZE"),
        });
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of `set`; `cpu < CPU_SETSIZE` was checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the kernel reads size_of::<cpu_set_t>() bytes from `set`, a live local.
    let r = unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(SysError::Affinity {
            pid,
            cpu,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// An anonymous private read-write mapping (`mmap(NULL, len, PROT_READ|PROT_WRITE,
/// MAP_PRIVATE|MAP_ANONYMOUS)`), unmapped on drop. Its length is rounded up to whole pages and
/// its start is page-aligned. Pages are not populated: the first touch faults each in under
/// whatever policy (`mbind`) the range has then.
#[derive(Debug)]
pub struct AnonMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

/// `len` rounded up to whole pages; `what` names the length in the error for 0 or overflow.
fn page_rounded(len: usize, what: &str) -> Result<usize, SysError> {
    let ps = page_size();
    len.checked_add(ps - 1)
        .map(|l| l / ps * ps)
        .filter(|l| *l > 0)
        .ok_or_else(|| SysError::Invalid {
            call: "mmap",
            what: format!("{what} {len}"),
        })
}

/// `mmap(NULL, len, prot, flags, fd, 0)`: a fresh mapping at an address of the kernel's
/// choosing (the owner unmaps it on drop); `failed` turns the OS error into the caller's.
fn mmap_fresh(
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    failed: impl FnOnce(io::Error) -> SysError,
) -> Result<std::ptr::NonNull<u8>, SysError> {
    // SAFETY: no address hint, so the new mapping cannot overlap anything we own; `fd` is -1
    // for an anonymous mapping or an open file the caller borrows for the call. The result
    // is checked for MAP_FAILED below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(failed(io::Error::last_os_error()));
    }
    std::ptr::NonNull::new(p.cast::<u8>()).ok_or_else(|| SysError::Invalid {
        call: "mmap",
        what: "kernel returned a NULL mapping".to_owned(),
    })
}

// SAFETY: the mapping is plain memory owned exclusively by this value; access goes through
// `&self`/`&mut self` borrows, so the usual aliasing rules apply across threads.
unsafe impl Send for AnonMapping {}
// SAFETY: as above; shared access is only through `&[u8]`/`&[u64]`.
unsafe impl Sync for AnonMapping {}

impl AnonMapping {
    /// Map `len` bytes (rounded up to pages).
    ///
    /// # Errors
    /// [`SysError::Invalid`] for `len == 0` or an overflowing length; [`SysError::Mmap`] if the
    /// kernel refuses (`ENOMEM`).
    pub fn new(len: usize) -> Result<Self, SysError> {
        let rounded = page_rounded(len, "length")?;
        let ptr = mmap_fresh(
            rounded,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            |source| SysError::Mmap {
                len: rounded,
                source,
            },
        )?;
        Ok(AnonMapping { ptr, len: rounded })
    }

    /// The start address (page-aligned).
    #[must_use]
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The length in bytes (a multiple of the page size).
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one page.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `madvise(MADV_NOHUGEPAGE)` over the whole mapping: keeps it in base pages, and gives its
    /// VMA a flag its neighbours lack, so the kernel does not merge it with an adjacent
    /// anonymous mapping (mm/vma.c `is_mergeable_vma()` compares `vm_flags`) and
    /// `/proc/PID/numa_maps` reports it on its own line.
    ///
    /// # Errors
    /// [`SysError::Madvise`] (`EINVAL` on kernels without THP).
    pub fn advise_nohugepage(&self) -> Result<(), SysError> {
        self.madvise(libc::MADV_NOHUGEPAGE)
    }

    /// `madvise(MADV_HUGEPAGE)` over the whole mapping, so that with THP in `madvise` mode its
    /// 2 MiB-aligned parts are faulted in as huge pages.
    ///
    /// # Errors
    /// [`SysError::Madvise`] (`EINVAL` on kernels without THP).
    pub fn advise_hugepage(&self) -> Result<(), SysError> {
        self.madvise(libc::MADV_HUGEPAGE)
    }

    /// `madvise(MADV_DONTFORK)` over the whole mapping: a child made by `fork(2)` does not
    /// inherit it. It matters for nothing else (not THP, not migration, not reclaim), so it
    /// gives the VMA a flag its neighbours lack, keeping it on its own `/proc/PID/numa_maps`
    /// line (mm/vma.c `is_mergeable_vma()` compares `vm_flags`), without opting it out of
    /// transparent huge pages as [`AnonMapping::advise_nohugepage`] does.
    ///
    /// # Errors
    /// [`SysError::Madvise`].
    pub fn advise_dontfork(&self) -> Result<(), SysError> {
        self.madvise(libc::MADV_DONTFORK)
    }

    /// `madvise` over the whole mapping with an advice that only sets VMA flags.
    fn madvise(&self, advice: libc::c_int) -> Result<(), SysError> {
        // SAFETY: the range is exactly our own live mapping; the advice values used here
        // (MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_DONTFORK) only set a VMA flag and never
        // change the contents.
        let r =
            unsafe { libc::madvise(self.ptr.as_ptr().cast::<libc::c_void>(), self.len, advice) };
        if r != 0 {
            return Err(SysError::Madvise {
                addr: self.addr(),
                len: self.len,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Times one `mprotect(2)` round trip over the whole mapping: `PROT_NONE`, then read and
    /// write again. Returns the two calls' wall times. On present pages the first is the
    /// kernel's PTE walk that NUMA balancing's scanner makes (mm/mprotect.c
    /// `change_protection()`, which `change_prot_numa()` calls with `MM_CP_PROT_NUMA`): every
    /// present PTE rewritten, then one TLB flush of the range. `tierd-workload pte-cost`
    /// divides it by the pages to measure what a PTE update costs on a machine (a TCG guest's
    /// against the host's).
    ///
    /// The mapping is inaccessible only between the two calls, while `&mut self` rules out
    /// any other reference into it. Should access fail to come back, the process aborts: a
    /// mapping the safe accessors cannot read must not outlive this call.
    ///
    /// # Errors
    /// [`SysError::Mprotect`] when the kernel refuses `PROT_NONE` (nothing changed then).
    pub fn time_protect_round_trip(
        &mut self,
    ) -> Result<(std::time::Duration, std::time::Duration), SysError> {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let t0 = std::time::Instant::now();
        self.mprotect(libc::PROT_NONE)?;
        let none = t0.elapsed();
        let t1 = std::time::Instant::now();
        let back = self.mprotect(rw);
        let restore = t1.elapsed();
        if let Err(e) = back {
            // Retried once; the range is our whole VMA, so no split can fail for want of
            // memory.
            if self.mprotect(rw).is_err() {
                eprintln!("fatal: {e}: the mapping stays inaccessible");
                std::process::abort();
            }
        }
        Ok((none, restore))
    }

    fn mprotect(&mut self, prot: libc::c_int) -> Result<(), SysError> {
        // SAFETY: the range is exactly our own live mapping. `&mut self` means no reference
        // into it exists while it may be PROT_NONE, and `time_protect_round_trip` restores
        // read/write access (or aborts) before it returns.
        let r = unsafe { libc::mprotect(self.ptr.as_ptr().cast::<libc::c_void>(), self.len, prot) };
        if r != 0 {
            return Err(SysError::Mprotect {
                addr: self.addr(),
                len: self.len,
                prot,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// The start address of every page, in order (for `move_pages`).
    #[must_use]
    pub fn page_addrs(&self) -> Vec<usize> {
        (0..self.len)
            .step_by(page_size())
            .map(|o| self.addr() + o)
            .collect()
    }

    /// The mapping as bytes. Reading an untouched page maps the shared zero page (no memory is
    /// allocated on any node).
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` readable bytes that live as long as `self`; anonymous
        // memory is always initialized (zero-filled on first touch).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping as mutable bytes.
    #[must_use]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping as 64-bit words (the start is page-aligned, so u64-aligned).
    #[must_use]
    pub fn as_u64_slice(&self) -> &[u64] {
        // SAFETY: page alignment implies 8-byte alignment; `len` is a multiple of the page size
        // and so of 8; every bit pattern is a valid u64.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u64>(), self.len / 8) }
    }

    /// The mapping as mutable 64-bit words.
    #[must_use]
    pub fn as_mut_u64_slice(&mut self) -> &mut [u64] {
        // SAFETY: as in `as_u64_slice`, with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<u64>(), self.len / 8) }
    }
}

impl Drop for AnonMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping created in `new`, and no borrow of it can
        // outlive `self`. A failure (impossible for a valid mapping) would only leak it.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len);
        }
    }
}

/// An anonymous private read-write mapping whose single pages can be given back to the kernel
/// while the rest stays in use: [`PageRun::discard`] (`MADV_DONTNEED`: the page reads back as
/// zeros) or [`PageRun::unmap`] (`munmap`: the page is gone, a hole in the mapping). Pages are
/// reached one at a time through [`PageRun`]s, disjoint runs of whole pages that threads can
/// own, so that no slice ever covers an unmapped page. The integrity workload uses it to make
/// the kernel split transparent huge pages under a running check: a partial `MADV_DONTNEED`
/// or `munmap` of a PMD-mapped THP splits the PMD (mm/huge_memory.c `__split_huge_pmd()`,
/// reached from `zap_pmd_range()` and, for the `munmap`, from `vma_adjust_trans_huge()` when
/// the VMA is split) and queues the folio for a deferred split (`deferred_split_folio()`).
#[derive(Debug)]
pub struct SparseMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    /// Per page: still mapped.
    mapped: Vec<bool>,
}

// SAFETY: as for `AnonMapping`: plain memory owned by this value, reached only through
// `&mut self` borrows (the runs).
unsafe impl Send for SparseMapping {}
// SAFETY: `&SparseMapping` gives no access to the memory at all.
unsafe impl Sync for SparseMapping {}

impl SparseMapping {
    /// Takes over an [`AnonMapping`] (its pages, policy, VMA flags and contents stay as they
    /// are); every page starts mapped.
    #[must_use]
    pub fn from_anon(m: AnonMapping) -> Self {
        let m = std::mem::ManuallyDrop::new(m);
        SparseMapping {
            ptr: m.ptr,
            len: m.len,
            mapped: vec![true; m.len / page_size()],
        }
    }

    /// The start address (page-aligned).
    #[must_use]
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The length in bytes, holes included.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one page.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pages still mapped.
    #[must_use]
    pub fn mapped_pages(&self) -> usize {
        self.mapped.iter().filter(|m| **m).count()
    }

    /// `n` (at least 1, at most one per page) contiguous runs of nearly equal numbers of
    /// pages covering the mapping, in order, each usable on its own thread.
    pub fn runs_mut(&mut self, n: usize) -> Vec<PageRun<'_>> {
        let pages = self.mapped.len();
        let n = n.clamp(1, pages.max(1));
        let ps = page_size();
        let base = self.ptr;
        let mut rest: &mut [bool] = &mut self.mapped;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let (start, end) = (i * pages / n, (i + 1) * pages / n);
            let (mine, tail) = rest.split_at_mut(end - start);
            rest = tail;
            // SAFETY: `start * ps < len` (or `start == pages` for an empty run, one past the
            // end), so the offset stays within (or one past) our own mapping.
            let ptr = unsafe { base.add(start * ps) };
            out.push(PageRun {
                ptr,
                first: start,
                mapped: mine,
                _owner: std::marker::PhantomData,
            });
        }
        out
    }
}

impl Drop for SparseMapping {
    fn drop(&mut self) {
        // Unmap only what is still ours: a hole may since hold another mapping of this
        // process (the kernel reuses free address space).
        let ps = page_size();
        let mut i = 0;
        while i < self.mapped.len() {
            if !self.mapped[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < self.mapped.len() && self.mapped[i] {
                i += 1;
            }
            // SAFETY: pages `start..i` are part of the mapping created for this value and
            // still mapped by it (holes were unmapped and recorded); no borrow of them can
            // outlive `self`.
            unsafe {
                libc::munmap(
                    self.ptr.as_ptr().add(start * ps).cast::<libc::c_void>(),
                    (i - start) * ps,
                );
            }
        }
    }
}

/// A run of whole pages of a [`SparseMapping`], borrowed exclusively: its pages can be read
/// and written one at a time, discarded or unmapped.
#[derive(Debug)]
pub struct PageRun<'a> {
    ptr: std::ptr::NonNull<u8>,
    first: usize,
    mapped: &'a mut [bool],
    _owner: std::marker::PhantomData<&'a mut [u8]>,
}

// SAFETY: a run is an exclusive borrow of its own pages (runs never overlap), like a
// `&mut [u8]`, which is Send.
unsafe impl Send for PageRun<'_> {}

impl PageRun<'_> {
    /// Index of the run's first page in the mapping.
    #[must_use]
    pub fn first_page(&self) -> usize {
        self.first
    }

    /// Pages in the run (mapped or not).
    #[must_use]
    pub fn pages(&self) -> usize {
        self.mapped.len()
    }

    /// The address of page `i` of the run.
    #[must_use]
    pub fn page_addr(&self, i: usize) -> usize {
        self.ptr.as_ptr() as usize + i * page_size()
    }

    /// Whether page `i` exists and is still mapped.
    #[must_use]
    pub fn is_mapped(&self, i: usize) -> bool {
        self.mapped.get(i).copied().unwrap_or(false)
    }

    /// Page `i` as 64-bit words; `None` when it is out of the run or unmapped.
    #[must_use]
    pub fn page_mut(&mut self, i: usize) -> Option<&mut [u64]> {
        if !self.is_mapped(i) {
            return None;
        }
        let ps = page_size();
        // SAFETY: page `i` lies in this run (checked above), which borrows it exclusively for
        // its lifetime, and is mapped read-write; page alignment implies u64 alignment and
        // every bit pattern is a valid u64. The returned borrow ties up `self`, so the page
        // cannot be unmapped or discarded while it is in use.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(i * ps).cast::<u64>(), ps / 8)
        })
    }

    fn check(&self, i: usize, call: &'static str) -> Result<(), SysError> {
        if self.is_mapped(i) {
            Ok(())
        } else {
            Err(SysError::Invalid {
                call,
                what: format!("page {i} of a run of {} is not mapped", self.pages()),
            })
        }
    }

    /// `madvise(MADV_DONTNEED)` on page `i`: its memory goes back to the kernel, and the next
    /// touch maps a fresh zero-filled page (private anonymous memory, mm/madvise.c).
    ///
    /// # Errors
    /// [`SysError::Invalid`] for a page out of the run or unmapped; [`SysError::Madvise`].
    pub fn discard(&mut self, i: usize) -> Result<(), SysError> {
        self.check(i, "madvise")?;
        let (addr, len) = (self.page_addr(i), page_size());
        // SAFETY: the page is ours, mapped, and borrowed exclusively through `&mut self`;
        // MADV_DONTNEED only replaces its contents by zeros, a valid value for any use.
        let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if r != 0 {
            return Err(SysError::Madvise {
                addr,
                len,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// `munmap` of page `i`: it is gone for good ([`PageRun::page_mut`] answers `None`).
    ///
    /// # Errors
    /// [`SysError::Invalid`] for a page out of the run or already unmapped;
    /// [`SysError::Munmap`].
    pub fn unmap(&mut self, i: usize) -> Result<(), SysError> {
        self.check(i, "munmap")?;
        let (addr, len) = (self.page_addr(i), page_size());
        // SAFETY: the page is ours, mapped, and borrowed exclusively through `&mut self`; no
        // slice of it is alive (`page_mut`'s borrow ends before this call), and it is marked
        // unmapped below so nothing reaches it again, the drop included.
        let r = unsafe { libc::munmap(addr as *mut libc::c_void, len) };
        if r != 0 {
            return Err(SysError::Munmap {
                addr,
                len,
                source: io::Error::last_os_error(),
            });
        }
        self.mapped[i] = false;
        Ok(())
    }
}

/// A shared, read-only mapping of a whole file (`mmap(NULL, len, PROT_READ, MAP_SHARED, fd,
/// 0)`), unmapped on drop: the guest workload maps files (with hostile names, for the chaos
/// lab) and keeps their pages accessed. Its contents are never handed out as a slice (another
/// process may write the file underneath); [`FileMapping::touch`] reads one byte per page.
#[derive(Debug)]
pub struct FileMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is only read, through volatile loads in `touch`; it is owned by this
// value and unmapped once, on drop.
unsafe impl Send for FileMapping {}
// SAFETY: as above; concurrent volatile reads of a shared file mapping are fine.
unsafe impl Sync for FileMapping {}

impl FileMapping {
    /// Maps the first `len` bytes (rounded up to pages) of `file`, which must be at least that
    /// long (a page past the end faults with SIGBUS when touched).
    ///
    /// # Errors
    /// [`SysError::Invalid`] for `len == 0`; [`SysError::MmapFile`] if the kernel refuses.
    pub fn new(file: &std::fs::File, len: usize) -> Result<Self, SysError> {
        use std::os::fd::AsRawFd as _;
        let rounded = page_rounded(len, "file length")?;
        let fd = file.as_raw_fd();
        let ptr = mmap_fresh(rounded, libc::PROT_READ, libc::MAP_SHARED, fd, |source| {
            SysError::MmapFile {
                len: rounded,
                fd,
                source,
            }
        })?;
        Ok(FileMapping { ptr, len: rounded })
    }

    /// The start address (page-aligned).
    #[must_use]
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The length in bytes (a multiple of the page size).
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one page.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads one byte of every page (faulting it in, setting its Accessed bit) and returns
    /// their wrapping sum, so the loads cannot be optimised away.
    #[must_use]
    pub fn touch(&self) -> u8 {
        let mut sum = 0u8;
        for off in (0..self.len).step_by(page_size()) {
            // SAFETY: `off < len`, so the address lies inside our live read-only mapping; the
            // caller promised the file covers it. A volatile load, because the file may change.
            sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(off)) });
        }
        sum
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping created in `new`; nothing borrows it.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_is_a_power_of_two() {
        let ps = page_size();
        assert!(ps >= 4096 && ps.is_power_of_two(), "{ps}");
    }

    #[test]
    fn mapping_rounds_up_and_is_writable() {
        let mut m = AnonMapping::new(5000).expect("mmap");
        assert_eq!(m.len(), 2 * page_size());
        assert_eq!(m.addr() % page_size(), 0);
        assert!(m.as_slice().iter().all(|b| *b == 0));
        m.as_mut_slice()[4999] = 7;
        m.as_mut_u64_slice()[0] = u64::MAX;
        assert_eq!(m.as_slice()[4999], 7);
        assert_eq!(m.as_u64_slice()[0], u64::MAX);
        assert_eq!(m.page_addrs(), vec![m.addr(), m.addr() + page_size()]);
    }

    #[test]
    fn file_mapping_reads_one_byte_per_page() {
        use std::io::Write as _;
        let mut f = tempfile::tempfile().expect("tmp");
        let ps = page_size();
        let mut data = vec![0u8; 2 * ps];
        data[0] = 3;
        data[ps] = 4;
        f.write_all(&data).expect("write");
        let m = FileMapping::new(&f, 2 * ps).expect("mmap");
        assert_eq!((m.len(), m.addr() % ps), (2 * ps, 0));
        assert_eq!(m.touch(), 7);
        assert!(matches!(
            FileMapping::new(&f, 0),
            Err(SysError::Invalid { .. })
        ));
    }

    /// A round trip of `mprotect(2)` leaves the contents readable and writable as they were.
    #[test]
    fn a_protect_round_trip_restores_access_and_keeps_the_contents() {
        let pages = 64;
        let mut m = AnonMapping::new(pages * page_size()).unwrap();
        for (i, w) in m.as_mut_u64_slice().iter_mut().enumerate() {
            *w = i as u64 ^ 0x5a5a;
        }
        let (none, restore) = m.time_protect_round_trip().unwrap();
        assert!(none > std::time::Duration::ZERO && restore > std::time::Duration::ZERO);
        assert!(m
            .as_u64_slice()
            .iter()
            .enumerate()
            .all(|(i, w)| *w == i as u64 ^ 0x5a5a));
        m.as_mut_u64_slice()[7] = 1;
        assert_eq!(m.as_u64_slice()[7], 1);
    }

    #[test]
    fn zero_length_mapping_is_an_error() {
        assert!(matches!(AnonMapping::new(0), Err(SysError::Invalid { .. })));
    }

    #[test]
    fn move_pages_checks_lengths_and_flags() {
        let mut st = [0i32; 1];
        let e = move_pages(0, &[0x1000, 0x2000], None, &mut st, 0).expect_err("len");
        assert!(matches!(e, SysError::Invalid { .. }), "{e}");
        let e = move_pages(0, &[0x1000], Some(&[0, 0]), &mut st, 0).expect_err("nodes");
        assert!(matches!(e, SysError::Invalid { .. }), "{e}");
        let e = move_pages(0, &[0x1000], None, &mut st, MPOL_MF_STRICT).expect_err("flags");
        assert!(matches!(e, SysError::Invalid { .. }), "{e}");
    }

    #[test]
    fn mbind_node0_then_default_and_node_of_addr() {
        let mut m = AnonMapping::new(4 * page_size()).expect("mmap");
        mbind(m.addr(), m.len(), MPOL_BIND, NodeMask(1), 0).expect("bind node 0");
        let (mode, mask) = get_mempolicy(Some(m.addr())).expect("policy");
        assert_eq!((mode, mask), (MPOL_BIND, NodeMask(1)));
        m.as_mut_slice()[0] = 1;
        assert_eq!(node_of_addr(m.addr()).expect("node"), 0);
        mbind(m.addr(), m.len(), MPOL_DEFAULT, NodeMask::EMPTY, 0).expect("default");
        let (mode, _) = get_mempolicy(Some(m.addr())).expect("policy");
        assert_eq!(mode, MPOL_DEFAULT);
    }

    #[test]
    fn mbind_to_a_missing_node_fails_with_its_errno() {
        let m = AnonMapping::new(page_size()).expect("mmap");
        // Node 40 exists on no test host: the kernel rejects a mask outside
        // node_states[N_MEMORY] with EINVAL (mm/mempolicy.c mpol_set_nodemask()).
        let e = mbind(m.addr(), m.len(), MPOL_BIND, NodeMask(1 << 40), 0).expect_err("bind");
        assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
        assert!(e.to_string().contains("mbind"), "{e}");
    }

    #[test]
    fn thread_policy_roundtrip() {
        // Run in a fresh thread so the test harness thread keeps its policy.
        std::thread::spawn(|| {
            set_mempolicy(MPOL_PREFERRED, NodeMask(1)).expect("set");
            let (mode, mask) = get_mempolicy(None).expect("get");
            assert_eq!((mode, mask), (MPOL_PREFERRED, NodeMask(1)));
            set_mempolicy(MPOL_DEFAULT, NodeMask::EMPTY).expect("reset");
            assert_eq!(get_mempolicy(None).expect("get").0, MPOL_DEFAULT);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn sparse_pages_can_be_discarded_and_unmapped_one_at_a_time() {
        let ps = page_size();
        let mut m = AnonMapping::new(8 * ps).expect("mmap");
        m.as_mut_slice().fill(0xAB);
        let (base, len) = (m.addr(), m.len());
        let mut s = SparseMapping::from_anon(m);
        assert_eq!((s.addr(), s.len(), s.mapped_pages()), (base, len, 8));
        {
            let mut runs = s.runs_mut(3);
            assert_eq!(runs.len(), 3);
            // Contiguous, in order, covering all 8 pages.
            assert_eq!(
                runs.iter()
                    .map(|r| (r.first_page(), r.pages()))
                    .collect::<Vec<_>>(),
                vec![(0, 2), (2, 3), (5, 3)]
            );
            assert_eq!(runs[1].page_addr(0), base + 2 * ps);
            let r = &mut runs[1];
            // The contents survived the hand-over; a discarded page reads back as zeros.
            assert!(r
                .page_mut(0)
                .expect("mapped")
                .iter()
                .all(|w| *w == 0xABAB_ABAB_ABAB_ABAB));
            r.discard(0).expect("discard");
            assert!(r.page_mut(0).expect("mapped").iter().all(|w| *w == 0));
            r.page_mut(0).expect("mapped")[0] = 7;
            assert_eq!(r.page_mut(0).expect("mapped")[0], 7);
            // An unmapped page is gone: no slice, no second unmap or discard.
            r.unmap(2).expect("unmap");
            assert!(!r.is_mapped(2) && r.page_mut(2).is_none());
            assert!(matches!(r.unmap(2), Err(SysError::Invalid { .. })));
            assert!(matches!(r.discard(2), Err(SysError::Invalid { .. })));
            assert!(
                matches!(r.discard(3), Err(SysError::Invalid { .. })),
                "out of the run"
            );
            // The kernel agrees that the page is gone.
            assert_eq!(
                node_of_addr(base + 4 * ps).map_err(|e| e.errno()),
                Err(Some(libc::EFAULT))
            );
        }
        assert_eq!(s.mapped_pages(), 7);
        // More runs than pages: one per page.
        assert_eq!(s.runs_mut(100).len(), 8);
        drop(s);
    }
}
