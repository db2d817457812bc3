//! SIGHUP reload over the captured 6.12 guest tree: a live change applies to the running
//! engine and backend and keeps the hotness store; a change that needs a restart, and a file
//! that does not validate, leave the configuration in force (docs/daemon.md, "Reload").
#![allow(clippy::tests_outside_test_module)]

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tierd_daemon::config::DaemonConfig;
use tierd_daemon::daemon::{
    reload, run, LinuxBackend, Preflight, Reload, ReloadOutcome, RunOptions,
};
use tierd_engine::plan::{NodeUsage, SystemUsage};
use tierd_engine::types::{Bytes, Nanos, NodeId, PageRef, SpaceId, Vpn};
use tierd_engine::{Engine, Observation, SourceKind};

fn config(extra: &str) -> DaemonConfig {
    // The guest tree captured by `tierd-vm capture-fixtures` (tests/common/mod.rs).
    let root =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tierd-linux/tests/fixtures/guest-6.12");
    let text = format!(
        "[scope]\npids = [1]\n{extra}\n[system]\nsys_root = \"{0}/sys\"\nproc_root = \"{0}/proc\"\n\
         cgroup_root = \"{0}/sys/fs/cgroup\"\n",
        root.display()
    );
    DaemonConfig::parse(&text, Path::new("fixture.toml")).expect("valid config")
}

/// One DAMON-style sighting of `n` pages on the slow node: tracked, not ready (threshold 2).
fn sight(engine: &mut Engine, n: u64, t_ms: u64) {
    let obs: Vec<Observation> = (0..n)
        .map(|v| Observation {
            page: PageRef::base(SpaceId(1), Vpn(0x1000 + v)),
            page_node: NodeId(1),
            accessing_node: None,
            source: SourceKind::AccessedBitScan,
            time: Nanos::from_millis(t_ms),
            weight: 1,
        })
        .collect();
    engine.observe(&obs);
}

fn usage() -> SystemUsage {
    let mut u = SystemUsage::default();
    for n in [0, 1] {
        u.nodes.insert(
            NodeId(n),
            NodeUsage {
                free: Bytes::gib(1),
                promo_watermark: Some(Bytes(0)),
            },
        );
    }
    u
}

fn tracked(engine: &Engine) -> u64 {
    engine.stats().engine.tracked_pages
}

#[test]
fn a_live_change_applies_and_keeps_the_hotness_store() {
    let cfg = config("");
    let pre = Preflight::check(&cfg).expect("two tiers");
    let mut engine = Engine::new(cfg.engine_config(), pre.topology.clone()).expect("engine");
    let mut backend = LinuxBackend::new(cfg.clone(), &pre.topology, Vec::new(), true);
    sight(&mut engine, 64, 0);
    engine.tick(Nanos::from_millis(100), &usage());
    assert_eq!(tracked(&engine), 64);

    let new = config(
        "[engine]\npromote_rate_limit_mbps = 128\nbatch_nr = 64\n\
         [daemon]\nrefresh_ms = 2000\n",
    );
    assert_eq!(
        reload(&mut engine, &mut backend, Ok(new.clone())),
        ReloadOutcome::Applied
    );
    assert_eq!(engine.config().promote_rate_limit_mbps, 128);
    assert_eq!(engine.config().batch_nr, 64);
    assert_eq!(backend.config(), &new);
    engine.tick(Nanos::from_millis(200), &usage());
    assert_eq!(
        tracked(&engine),
        64,
        "the hotness store survives the reload"
    );
    // The second sighting after the reload completes the first one's: ready, promoted.
    sight(&mut engine, 64, 250);
    let plan = engine.tick(Nanos::from_millis(300), &usage());
    let pages: u64 = plan.batches.iter().map(|b| b.nr_pages().0).sum();
    assert_eq!(pages, 64, "{plan:?}");
}

#[test]
fn a_restart_change_or_a_bad_file_is_refused_and_the_old_config_stays() {
    let cfg = config("");
    let pre = Preflight::check(&cfg).expect("two tiers");
    let mut engine = Engine::new(cfg.engine_config(), pre.topology.clone()).expect("engine");
    let mut backend = LinuxBackend::new(cfg.clone(), &pre.topology, Vec::new(), true);
    sight(&mut engine, 8, 0);
    engine.tick(Nanos::from_millis(100), &usage());
    // A live key together with one that needs a restart: nothing applies.
    for extra in [
        "[engine]\npromote_rate_limit_mbps = 128\nmode = \"precise\"\n",
        "[engine]\npromote_rate_limit_mbps = 128\n[sources]\nenabled = [\"idle\"]\n",
        "[engine]\npromote_rate_limit_mbps = 128\n[daemon]\nmetrics_listen = \"127.0.0.1:1\"\n",
    ] {
        assert_eq!(
            reload(&mut engine, &mut backend, Ok(config(extra))),
            ReloadOutcome::Refused,
            "{extra}"
        );
        assert_eq!(engine.config(), &cfg.engine_config(), "{extra}");
        assert_eq!(backend.config(), &cfg, "{extra}");
    }
    // A target that is not top tier on this machine: valid in the file, not here.
    let slow_target = config("[engine]\ntarget_nid = 1\n");
    assert_eq!(
        reload(&mut engine, &mut backend, Ok(slow_target)),
        ReloadOutcome::Invalid
    );
    let bad = DaemonConfig::parse("[engine]\nfreq_threshold = 9\n", Path::new("bad.toml"))
        .expect_err("out of range");
    assert_eq!(
        reload(&mut engine, &mut backend, Err(bad)),
        ReloadOutcome::Invalid
    );
    assert_eq!(backend.config(), &cfg);
    engine.tick(Nanos::from_millis(200), &usage());
    assert_eq!(tracked(&engine), 8);
}

#[test]
fn the_loop_takes_a_requested_reload_and_counts_it() {
    let cfg = config("");
    let pre = Preflight::check(&cfg).expect("two tiers");
    let run_with = |load: Arc<tierd_daemon::daemon::ConfigLoader>| {
        let opts = RunOptions {
            reload: Some(Reload {
                requested: Arc::new(AtomicBool::new(true)),
                load,
            }),
            dry_run: true,
            duration: Some(Duration::from_millis(300)),
            ..RunOptions::default()
        };
        let stop = AtomicBool::new(false);
        run(&cfg, &pre, Vec::new(), &[], &opts, &stop, &mut |_| {})
            .expect("runs")
            .snapshot
            .config_reloads
    };
    let counts = run_with(Arc::new(|| Ok(config("[engine]\nbatch_nr = 128\n"))));
    let want = |ok, refused, invalid| {
        [("invalid", invalid), ("ok", ok), ("refused", refused)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<std::collections::BTreeMap<String, u64>>()
    };
    assert_eq!(counts, want(1, 0, 0));
    let counts = run_with(Arc::new(|| {
        Ok(config("[daemon]\nstate_dir = \"/tmp/x\"\n"))
    }));
    assert_eq!(counts, want(0, 1, 0));
    let text = tierd_daemon::metrics::render_prometheus(&tierd_daemon::metrics::Snapshot {
        config_reloads: counts,
        ..Default::default()
    });
    assert!(
        text.contains("tierd_config_reloads_total{result=\"refused\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("tierd_config_reloads_total{result=\"ok\"} 0"),
        "{text}"
    );
}
