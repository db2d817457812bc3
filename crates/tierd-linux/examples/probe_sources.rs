//! Prints, for each hotness source, whether it can run on this machine and why.
//!
//! `cargo run -p tierd-linux --example probe_sources [SYS_ROOT [PROC_ROOT]]`
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let sys = PathBuf::from(
        args.next()
            .unwrap_or_else(|| tierd_linux::DEFAULT_SYS_ROOT.into()),
    );
    let proc_root = PathBuf::from(
        args.next()
            .unwrap_or_else(|| tierd_linux::DEFAULT_PROC_ROOT.into()),
    );
    for s in tierd_linux::source::probe_all(&sys, &proc_root) {
        println!("{s}");
    }
}
