//! `[topology]`: tierd on a machine whose kernel puts every node in one tier (6.1-6.9 with a
//! CPU-less node present at boot, or wrong HMAT). The captured 6.12 guest tree is made flat
//! (both nodes in `memory_tier4`, as the guest shows without HMAT): without the override
//! tierd refuses to start, with it it tiers the machine as told and says that it overrides
//! the kernel, showing both views.
#![allow(
    clippy::tests_outside_test_module,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod common;

use std::path::Path;

use tierd_daemon::config::DaemonConfig;
use tierd_daemon::daemon::{DaemonError, Preflight, EXIT_CONFIG, EXIT_UNAVAILABLE};
use tierd_engine::types::NodeId;

/// A private flat copy of the guest tree: node 1's own tier removed, both nodes in tier 4.
fn flat_tree() -> tempfile::TempDir {
    let d = common::copy_fixture();
    let tiering = d.path().join("root/sys/devices/virtual/memory_tiering");
    std::fs::remove_dir_all(tiering.join("memory_tier54")).unwrap();
    std::fs::write(tiering.join("memory_tier4/nodelist"), "0-1\n").unwrap();
    d
}

fn config(root: &Path, extra: &str) -> Result<DaemonConfig, String> {
    let text = format!(
        "[scope]\npids = [1]\n\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"{0}/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n\n{extra}",
        root.display()
    );
    DaemonConfig::parse(&text, Path::new("flat.toml")).map_err(|e| e.to_string())
}

#[test]
fn a_flat_machine_is_refused_without_the_override() {
    let d = flat_tree();
    let cfg = config(&d.path().join("root"), "").unwrap();
    let err = Preflight::check(&cfg).expect_err("one tier");
    assert!(matches!(err, DaemonError::NothingToTier(_)), "{err}");
    assert_eq!(err.exit_code(), EXIT_UNAVAILABLE);
    // The refusal says how to get past it.
    assert!(err.to_string().contains("[topology]"), "{err}");
}

#[test]
fn the_override_tiers_a_flat_machine_and_shows_both_views() {
    let d = flat_tree();
    let root = d.path().join("root");
    for extra in [
        "[topology]\nfast = [0]\nslow = [1]\n",
        "[topology]\ntiers = [[0], [1]]\n",
    ] {
        let cfg = config(&root, extra).unwrap();
        let pre = Preflight::check(&cfg).expect("tiered by the override");
        assert_eq!(pre.topology.tiers().len(), 2, "{extra}");
        assert!(pre.topology.is_toptier(NodeId(0)));
        assert!(!pre.topology.is_toptier(NodeId(1)));
        assert_eq!(
            pre.topology
                .demotion_targets(NodeId(0))
                .iter()
                .collect::<Vec<_>>(),
            vec![NodeId(1)],
            "node 0 demotes to node 1"
        );
        let kernel = pre
            .kernel_topology
            .as_ref()
            .expect("the kernel's view is kept");
        assert_eq!(kernel.tiers().len(), 1);
        let w: Vec<&String> = pre
            .warnings
            .iter()
            .filter(|w| w.contains("[topology] overrides"))
            .collect();
        assert_eq!(w.len(), 1, "{:?}", pre.warnings);
        assert!(
            w[0].contains("the kernel has memory_tier4 = nodes 0,1"),
            "{}",
            w[0]
        );
        assert!(
            w[0].contains("tierd uses memory_tier4 = nodes 0; memory_tier5 = nodes 1"),
            "{}",
            w[0]
        );
        let text = pre.describe();
        assert!(
            text.contains("kernel's tiers (overridden by [topology])"),
            "{text}"
        );
        assert!(text.contains("tierd's tiers ([topology])"), "{text}");
    }
}

/// The override also replaces tiers the kernel has (wrong HMAT can put a slow node above a
/// fast one): on the unchanged tree, naming node 1 fast is taken as asked.
#[test]
fn the_override_replaces_the_kernels_tiers_and_its_errors_are_config_errors() {
    let root = common::fixture();
    let cfg = config(&root, "[topology]\nfast = [1]\nslow = [0]\n").unwrap();
    // Node 1 (no CPUs) named fast: taken as asked. The engine puts node 0 one tier below it,
    // still inside the top tier's distance, so both are top tier and nothing is refused.
    let pre = Preflight::check(&cfg).expect("node 1 named fast");
    assert!(pre.topology.is_toptier(NodeId(1)));
    // A node the machine does not have, or a memory node left out: one-line config errors
    // at start (exit 78), naming the node.
    for (extra, needle) in [
        (
            "[topology]\nfast = [0]\nslow = [2]\n",
            "node 2 has no memory",
        ),
        ("[topology]\ntiers = [[0], [3]]\n", "node 3 has no memory"),
    ] {
        let cfg = config(&root, extra).unwrap();
        let e = Preflight::check(&cfg).expect_err(extra);
        assert!(matches!(e, DaemonError::TopologyOverride(_)), "{e}");
        assert!(e.to_string().contains(needle), "{e}");
        assert!(!e.to_string().contains('\n'));
        assert_eq!(e.exit_code(), EXIT_CONFIG);
    }
}

/// What the file alone can tell is refused when it is parsed, with the key and line.
#[test]
fn malformed_overrides_are_refused_when_parsed() {
    let root = common::fixture();
    for (extra, key, why) in [
        ("[topology]\nfast = [0]\n", "topology.slow", "name both"),
        ("[topology]\nslow = [1]\n", "topology.fast", "name both"),
        (
            "[topology]\nfast = [0]\nslow = [1]\ntiers = [[0], [1]]\n",
            "topology.tiers",
            "not both",
        ),
        (
            "[topology]\ntiers = [[0, 1]]\n",
            "topology.tiers",
            "at least two",
        ),
        (
            "[topology]\ntiers = [[0], []]\n",
            "topology.tiers",
            "tier 1 names no node",
        ),
        (
            "[topology]\ntiers = [[0], [0]]\n",
            "topology.tiers",
            "node 0 is named twice",
        ),
        (
            "[topology]\nfast = [0]\nslow = [64]\n",
            "topology.fast",
            "beyond",
        ),
        (
            "[topology]\nfast = [0]\nslow = [1]\nwhat = 1\n",
            "topology",
            "unknown field",
        ),
    ] {
        let e = config(&root, extra).expect_err(extra);
        assert!(e.contains(key) && e.contains(why), "{extra}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
