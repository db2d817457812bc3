//! The daemon's backend against the tree captured from the Debian 6.12 guest
//! (tests/fixtures/guest-6.12, see its README): preflight, scope by cgroup, owners and
//! policies from numa_maps, usage from node meminfo and memory.low.
#![allow(clippy::tests_outside_test_module)]

use std::path::PathBuf;

use tierd_daemon::config::DaemonConfig;
use tierd_daemon::daemon::{LinuxBackend, Preflight};
use tierd_engine::policy::Owner;
use tierd_engine::types::{Bytes, CgroupId, Nanos, NodeId, SpaceId};
use tierd_engine::{Backend, OwnerUpdate};

fn guest_config(scope: &str) -> DaemonConfig {
    let root =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tierd-linux/tests/fixtures/guest-6.12");
    let text = format!(
        "{scope}\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"{0}/proc\"\ncgroup_root = \"{0}/sys/fs/cgroup\"\n",
        root.display()
    );
    DaemonConfig::parse(&text, std::path::Path::new("fixture.toml")).expect("valid config")
}

#[test]
fn preflight_finds_two_tiers_and_warns_about_nothing_it_should_not() {
    let cfg = guest_config("[scope]\npids = [1]");
    let pre = Preflight::check(&cfg).expect("two tiers");
    assert_eq!(pre.topology.tiers().len(), 2);
    assert!(pre.topology.is_toptier(NodeId(0)));
    assert!(!pre.topology.is_toptier(NodeId(1)));
    // The guest ran with numa_balancing = 1 (normal balancing, no tiering) and demotion off:
    // neither fights tierd's promotion.
    assert_eq!(pre.numa_balancing, Some(1));
    assert_eq!(pre.demotion_enabled, Some(false));
    // A fixture tree has no /proc/self: the pid namespace check can only say so.
    assert!(
        pre.warnings.iter().all(|w| w.contains("pid namespace")),
        "{:?}",
        pre.warnings
    );
    let text = pre.describe();
    assert!(
        text.contains("node 1: ") && text.contains("0 CPUs"),
        "{text}"
    );
}

#[test]
fn kernel_tiering_on_is_warned_about() {
    let mut cfg = guest_config("[scope]\npids = [1]");
    // Same tree, but a proc root whose numa_balancing says 2: build it in a temp dir.
    let tmp = std::env::temp_dir().join(format!("tierd-nb-{}", std::process::id()));
    std::fs::create_dir_all(tmp.join("sys/kernel")).expect("dir");
    std::fs::write(tmp.join("sys/kernel/numa_balancing"), "2\n").expect("write");
    cfg.system.proc_root = tmp.clone();
    let pre = Preflight::check(&cfg).expect("still runs");
    let w: Vec<&String> = pre
        .warnings
        .iter()
        .filter(|w| !w.contains("pid namespace"))
        .collect();
    assert_eq!(w.len(), 1, "{:?}", pre.warnings);
    assert!(w[0].contains("numa_balancing = 2"));
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn scope_by_cgroup_yields_owner_policies_and_usage() {
    let cfg = guest_config("[scope]\ncgroups = [\"/tierd-fx\"]");
    let pre = Preflight::check(&cfg).expect("two tiers");
    let mut backend = LinuxBackend::new(cfg, &pre.topology, Vec::new(), true);
    backend.refresh(Nanos::ZERO);
    // cgroup.procs of tierd-fx holds the dd whose buffer is on node 1 (meta/pids.env).
    assert_eq!(backend.pids(), vec![152]);
    let mut updates = Vec::new();
    backend.drain_owner_updates(&mut updates).expect("updates");
    let owner = updates.iter().find_map(|u| match u {
        OwnerUpdate::Owner { space, owner } if *space == SpaceId(152) => Some(*owner),
        _ => None,
    });
    let Some(Owner { pid, cgroup }) = owner else {
        panic!("no owner update: {updates:?}")
    };
    assert_eq!(pid, 152);
    assert_ne!(cgroup, CgroupId::ROOT, "a cgroup of its own");
    assert!(updates
        .iter()
        .any(|u| matches!(u, OwnerUpdate::Policies { space, .. } if *space == SpaceId(152))));
    // Drained: nothing more until the next refresh.
    let mut again = Vec::new();
    backend.drain_owner_updates(&mut again).expect("updates");
    assert!(again.is_empty());

    let usage = backend.usage(Nanos::ZERO).expect("usage");
    assert!(usage.nodes[&NodeId(0)].free > Bytes(0));
    assert!(usage.nodes[&NodeId(1)].free > Bytes(0));
    let cg = usage.cgroups.get(&cgroup).expect("the cgroup's usage");
    assert_eq!(cg.low, Bytes(64 << 20), "memory.low = 64M");
    // Its memory sits on node 1 (cpuset.mems=1): almost nothing on the fast tier.
    assert!(cg.fast_usage < Bytes(8 << 20), "{:?}", cg.fast_usage);
}

#[test]
fn pids_that_do_not_exist_are_not_in_scope() {
    // pid 1 exists in the capture; 999999 does not: it is simply not in scope.
    let cfg = guest_config("[scope]\npids = [1, 999999]");
    let pre = Preflight::check(&cfg).expect("two tiers");
    let mut backend = LinuxBackend::new(cfg, &pre.topology, Vec::new(), true);
    backend.refresh(Nanos::ZERO);
    assert_eq!(backend.pids(), vec![1]);
}

#[test]
fn a_bind_policy_from_the_real_kernel_reaches_the_engine_as_a_nodemask() {
    use tierd_engine::policy::PolicyMode;
    use tierd_linux::read::numa_maps::{join_maps, parse_maps, parse_numa_maps, policy_ranges};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tierd-linux/tests/fixtures/guest-6.12/extra");
    let numa = std::fs::read_to_string(dir.join("numa_maps-bind")).expect("numa_maps");
    let maps = std::fs::read_to_string(dir.join("maps-bind")).expect("maps");
    let vmas = join_maps(
        parse_numa_maps(&numa).expect("numa_maps parses"),
        &parse_maps(&maps).expect("maps parses"),
    );
    let ranges = policy_ranges(&vmas);
    // Exactly the 8 MiB buffer is bound, to node 1 only.
    assert_eq!(ranges.len(), 1, "{ranges:?}");
    let (start, end, pol) = ranges[0];
    assert_eq!(end.0 - start.0, 2048);
    assert_eq!(pol.mode, PolicyMode::Bind);
    assert!(pol.nodes.contains(NodeId(1)) && !pol.nodes.contains(NodeId(0)));
}
