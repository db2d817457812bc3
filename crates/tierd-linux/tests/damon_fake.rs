//! DAMON monitor against a fake sysfs that emulates the kernel's side effects
//! (mm/damon/sysfs.c, sysfs-schemes.c, 6.12): writing `nr_*` files creates and removes the
//! numbered directories, `nr_kdamonds` is refused while a kdamond runs, `state` accepts the
//! documented commands, and `update_schemes_tried_regions` fills `tried_regions` from a
//! "kernel view" of each target's regions, honouring the scheme's `target` filter and
//! `nr_accesses` range.
// Integration tests are their own crate; the unit-test lint does not apply here, and the
// fixture helpers outside `#[test]` fns panic on a broken fixture like the tests do.
#![allow(clippy::tests_outside_test_module, clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use tierd_engine::types::Nanos;
use tierd_linux::source::damon::{
    probe_with, DamonConfig, DamonError, DamonFs, DamonMonitor, DamonRegion, IntervalsGoal,
    IntervalsTuning, RealFs, ADMIN_PATH, MAX_FIT_REGIONS,
};

/// (start, end, nr_accesses, age)
type Region = (u64, u64, u64, u64);

#[derive(Debug)]
struct FakeKernel {
    admin: PathBuf,
    /// Regions DAMON "sees" per pid.
    view: RefCell<HashMap<u32, Vec<Region>>>,
    /// Processes that exist.
    live: RefCell<Vec<u32>>,
    /// Every write, relative to the admin dir.
    log: RefCell<Vec<(String, String)>>,
    /// A 6.15+ kernel: contexts have `monitoring_attrs/intervals/intervals_goal`.
    intervals_goal: std::cell::Cell<bool>,
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(22)
}

fn put(p: &Path, v: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, v).unwrap();
}

fn rd(p: &Path) -> String {
    fs::read_to_string(p).unwrap().trim().to_string()
}

impl FakeKernel {
    fn new(sys: &Path) -> Self {
        let admin = sys.join(ADMIN_PATH);
        put(&admin.join("kdamonds/nr_kdamonds"), "0\n");
        FakeKernel {
            admin,
            view: RefCell::new(HashMap::new()),
            live: RefCell::new(Vec::new()),
            log: RefCell::new(Vec::new()),
            intervals_goal: std::cell::Cell::new(false),
        }
    }

    /// Recreates `n` numbered dirs under `dir` with `make` (the kernel removes the old ones).
    fn renumber(dir: &Path, n: usize, make: impl Fn(&Path)) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().parse::<usize>().is_ok() {
                fs::remove_dir_all(e.path()).unwrap();
            }
        }
        for i in 0..n {
            let d = dir.join(i.to_string());
            fs::create_dir_all(&d).unwrap();
            make(&d);
        }
    }

    fn kdamond_on(&self, k: &Path) -> bool {
        rd(&k.join("state")) == "on"
    }

    fn any_on(&self) -> bool {
        let kd = self.admin.join("kdamonds");
        let n: usize = rd(&kd.join("nr_kdamonds")).parse().unwrap();
        (0..n).any(|i| self.kdamond_on(&kd.join(i.to_string())))
    }

    fn update_tried_regions(&self, k: &Path) {
        let ctx = k.join("contexts/0");
        let nt: usize = rd(&ctx.join("targets/nr_targets")).parse().unwrap();
        let pids: Vec<u32> = (0..nt)
            .map(|i| {
                rd(&ctx.join(format!("targets/{i}/pid_target")))
                    .parse()
                    .unwrap()
            })
            .collect();
        let ns: usize = rd(&ctx.join("schemes/nr_schemes")).parse().unwrap();
        let view = self.view.borrow();
        for s in 0..ns {
            let sd = ctx.join(format!("schemes/{s}"));
            let min: u64 = rd(&sd.join("access_pattern/nr_accesses/min"))
                .parse()
                .unwrap();
            let max: u64 = rd(&sd.join("access_pattern/nr_accesses/max"))
                .parse()
                .unwrap();
            // Core target filter: a filter of type target with matching N keeps only that
            // target (mm/damon/core.c __damos_filter_out: filtered when matched == matching).
            let nf: usize = rd(&sd.join("filters/nr_filters")).parse().unwrap();
            let mut keep: Vec<usize> = (0..nt).collect();
            for f in 0..nf {
                let fd = sd.join(format!("filters/{f}"));
                if rd(&fd.join("type")) == "target" {
                    let idx: usize = rd(&fd.join("damon_target_idx")).parse().unwrap();
                    let matching = rd(&fd.join("matching")) == "Y";
                    keep.retain(|&t| (t == idx) != matching);
                }
            }
            let mut regions = Vec::new();
            for t in keep {
                for r in view.get(&pids[t]).into_iter().flatten() {
                    if r.2 >= min && r.2 <= max {
                        regions.push(*r);
                    }
                }
            }
            let td = sd.join("tried_regions");
            Self::renumber(&td, regions.len(), |_| {});
            for (i, r) in regions.iter().enumerate() {
                let d = td.join(i.to_string());
                put(&d.join("start"), &format!("{}\n", r.0));
                put(&d.join("end"), &format!("{}\n", r.1));
                put(&d.join("nr_accesses"), &format!("{}\n", r.2));
                put(&d.join("age"), &format!("{}\n", r.3));
                put(&d.join("sz_filter_passed"), "0\n");
            }
        }
    }

    fn handle_state(&self, k: &Path, cmd: &str) -> io::Result<()> {
        let on = self.kdamond_on(k);
        match cmd {
            "on" => {
                if on {
                    return Err(io::Error::from_raw_os_error(16));
                }
                let ctx = k.join("contexts/0");
                if rd(&ctx.join("operations")) != "vaddr" {
                    return Err(einval());
                }
                let nt: usize = rd(&ctx.join("targets/nr_targets")).parse().unwrap();
                for i in 0..nt {
                    let pid: u32 = rd(&ctx.join(format!("targets/{i}/pid_target")))
                        .parse()
                        .unwrap();
                    if !self.live.borrow().contains(&pid) {
                        return Err(einval());
                    }
                }
                put(&k.join("state"), "on\n");
                put(&k.join("pid"), "4321\n");
            }
            "off" => {
                if !on {
                    return Err(einval());
                }
                put(&k.join("state"), "off\n");
                put(&k.join("pid"), "-1\n");
            }
            "commit" => {
                if !on {
                    return Err(einval());
                }
                // mm/damon/core.c damon_set_attrs(): sample_interval > aggr_interval is
                // -EINVAL.
                let iv = k.join("contexts/0/monitoring_attrs/intervals");
                let s: u64 = rd(&iv.join("sample_us")).parse().unwrap();
                let a: u64 = rd(&iv.join("aggr_us")).parse().unwrap();
                if s > a {
                    return Err(einval());
                }
                // damon_set_attrs(): min_nr_regions < 3 or min > max is -EINVAL.
                let nr = k.join("contexts/0/monitoring_attrs/nr_regions");
                let min: u64 = rd(&nr.join("min")).parse().unwrap();
                let max: u64 = rd(&nr.join("max")).parse().unwrap();
                if min < 3 || min > max {
                    return Err(einval());
                }
            }
            "update_tuned_intervals" => {
                if !on {
                    return Err(einval());
                }
                // The kernel writes what it tuned into the files (6.15+).
                let iv = k.join("contexts/0/monitoring_attrs/intervals");
                put(&iv.join("sample_us"), "20000\n");
                put(&iv.join("aggr_us"), "400000\n");
            }
            "update_schemes_tried_regions" => {
                if !on {
                    return Err(einval());
                }
                self.update_tried_regions(k);
            }
            _ => return Err(einval()),
        }
        Ok(())
    }
}

impl DamonFs for &FakeKernel {
    fn read(&self, path: &Path) -> io::Result<String> {
        RealFs.read(path)
    }

    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        let rel = path
            .strip_prefix(&self.admin)
            .map_err(|_| io::Error::from_raw_os_error(2))?
            .to_string_lossy()
            .into_owned();
        self.log.borrow_mut().push((rel.clone(), value.to_string()));
        if !path.exists() {
            // sysfs: no creating files.
            return Err(io::Error::from_raw_os_error(2));
        }
        let parent = path.parent().unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        let n = || value.trim().parse::<usize>().map_err(|_| einval());
        match name.as_ref() {
            "nr_kdamonds" => {
                if self.any_on() {
                    return Err(io::Error::from_raw_os_error(16));
                }
                FakeKernel::renumber(parent, n()?, |d| {
                    put(&d.join("state"), "off\n");
                    put(&d.join("pid"), "-1\n");
                    put(&d.join("contexts/nr_contexts"), "0\n");
                });
            }
            "nr_contexts" => FakeKernel::renumber(parent, n()?, |d| {
                if self.intervals_goal.get() {
                    let g = d.join("monitoring_attrs/intervals/intervals_goal");
                    for f in ["access_bp", "aggrs", "min_sample_us", "max_sample_us"] {
                        put(&g.join(f), "0\n");
                    }
                }
                put(&d.join("avail_operations"), "vaddr\nfvaddr\npaddr\n");
                put(&d.join("operations"), "vaddr\n");
                let a = d.join("monitoring_attrs");
                put(&a.join("intervals/sample_us"), "5000\n");
                put(&a.join("intervals/aggr_us"), "100000\n");
                put(&a.join("intervals/update_us"), "60000000\n");
                put(&a.join("nr_regions/min"), "10\n");
                put(&a.join("nr_regions/max"), "1000\n");
                put(&d.join("targets/nr_targets"), "0\n");
                put(&d.join("schemes/nr_schemes"), "0\n");
            }),
            "nr_targets" => FakeKernel::renumber(parent, n()?, |d| {
                put(&d.join("pid_target"), "0\n");
                put(&d.join("regions/nr_regions"), "0\n");
            }),
            "nr_schemes" => FakeKernel::renumber(parent, n()?, |d| {
                put(&d.join("action"), "stat\n");
                for f in ["sz", "nr_accesses", "age"] {
                    put(&d.join(format!("access_pattern/{f}/min")), "0\n");
                    put(&d.join(format!("access_pattern/{f}/max")), "0\n");
                }
                put(&d.join("filters/nr_filters"), "0\n");
                put(&d.join("tried_regions/total_bytes"), "0\n");
            }),
            "nr_filters" => FakeKernel::renumber(parent, n()?, |d| {
                put(&d.join("type"), "anon\n");
                put(&d.join("matching"), "N\n");
                put(&d.join("damon_target_idx"), "0\n");
            }),
            "state" => return self.handle_state(parent, value.trim()),
            _ => {}
        }
        fs::write(path, format!("{}\n", value.trim()))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        RealFs.list(path)
    }
}

fn setup() -> (tempfile::TempDir, FakeKernel) {
    let t = tempfile::tempdir().unwrap();
    let k = FakeKernel::new(&t.path().join("sys"));
    k.live.borrow_mut().extend([100, 200, 300]);
    k.view
        .borrow_mut()
        .insert(100, vec![(0x1000, 0x5000, 7, 3), (0x5000, 0x9000, 0, 40)]);
    k.view
        .borrow_mut()
        .insert(200, vec![(0x1000, 0x2000, 2, 0)]);
    (t, k)
}

fn admin(t: &tempfile::TempDir) -> PathBuf {
    t.path().join("sys").join(ADMIN_PATH)
}

#[test]
fn configures_vaddr_and_reports_regions_per_target() {
    let (t, k) = setup();
    let a = admin(&t);
    let cfg = DamonConfig {
        min_nr_accesses: 1,
        ..DamonConfig::default()
    };
    let mut m = DamonMonitor::new(&k, &t.path().join("sys"), cfg).unwrap();
    assert_eq!(rd(&a.join("kdamonds/nr_kdamonds")), "1");
    let ctx = a.join("kdamonds/0/contexts/0");
    assert_eq!(rd(&ctx.join("operations")), "vaddr");
    assert_eq!(
        rd(&ctx.join("monitoring_attrs/intervals/update_us")),
        "1000000"
    );
    assert_eq!(rd(&ctx.join("monitoring_attrs/nr_regions/min")), "10");

    m.set_targets(&[100, 200]).unwrap();
    assert!(m.is_on());
    assert_eq!(rd(&a.join("kdamonds/0/state")), "on");
    assert_eq!(rd(&ctx.join("targets/1/pid_target")), "200");
    assert_eq!(rd(&ctx.join("schemes/1/filters/0/type")), "target");
    assert_eq!(rd(&ctx.join("schemes/1/filters/0/damon_target_idx")), "1");

    let (regions, stats) = m.collect(Nanos(50)).unwrap();
    assert_eq!(stats.regions, 2);
    assert!(!stats.kdamond_stopped);
    assert_eq!(
        regions,
        vec![
            DamonRegion {
                pid: 100,
                start: 0x1000,
                end: 0x5000,
                nr_accesses: 7,
                age: 3,
                time: Nanos(50)
            },
            DamonRegion {
                pid: 200,
                start: 0x1000,
                end: 0x2000,
                nr_accesses: 2,
                age: 0,
                time: Nanos(50)
            },
        ]
    );
}

/// With `report_idle`, a second `stat` scheme per target (`nr_accesses` 0..0, the same target
/// filter) reports the regions with no access, read back with the accessed ones; their age
/// becomes the idle start.
#[test]
fn idle_regions_come_from_a_second_scheme_per_target() {
    let (t, k) = setup();
    let a = admin(&t);
    let cfg = DamonConfig {
        report_idle: true,
        ..DamonConfig::default()
    };
    let mut m = DamonMonitor::new(&k, &t.path().join("sys"), cfg).unwrap();
    m.set_targets(&[100, 200]).unwrap();
    let ctx = a.join("kdamonds/0/contexts/0");
    assert_eq!(rd(&ctx.join("schemes/nr_schemes")), "4");
    assert_eq!(
        rd(&ctx.join("schemes/2/access_pattern/nr_accesses/max")),
        "0"
    );
    assert_eq!(rd(&ctx.join("schemes/3/filters/0/damon_target_idx")), "1");
    assert_eq!(rd(&ctx.join("schemes/3/filters/0/matching")), "N");
    let (regions, _) = m.collect(Nanos::from_secs(60)).unwrap();
    let got: Vec<(u32, u64, u64)> = regions
        .iter()
        .map(|r| (r.pid, r.start, r.nr_accesses))
        .collect();
    assert_eq!(
        got,
        vec![(100, 0x1000, 7), (100, 0x5000, 0), (200, 0x1000, 2)]
    );
    let mut idle = Vec::new();
    tierd_linux::source::damon::idle_ranges(&regions, 100_000, Nanos::from_secs(60), &mut idle);
    // Region (0x5000, 0x9000) of pid 100, age 40 x 100 ms: idle since 56 s.
    assert_eq!(idle.len(), 1);
    assert_eq!(
        (idle[0].pid, idle[0].start.0, idle[0].nr_pages),
        (100, 5, 4)
    );
    assert_eq!(idle[0].since, Nanos::from_secs(56));
}

#[test]
fn target_change_commits_and_drop_cleans_up() {
    let (t, k) = setup();
    let a = admin(&t);
    {
        let mut m = DamonMonitor::new(&k, &t.path().join("sys"), DamonConfig::default()).unwrap();
        m.set_targets(&[100]).unwrap();
        m.set_targets(&[200, 300]).unwrap();
        let log = k.log.borrow();
        let states: Vec<&str> = log
            .iter()
            .filter(|(p, _)| p.ends_with("/state"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(states, vec!["on", "commit"]);
        drop(log);
        let (regions, _) = m.collect(Nanos(1)).unwrap();
        assert!(regions.iter().all(|r| r.pid == 200));
        assert_eq!(m.pids(), &[200, 300]);
    }
    // Dropped: off, and nr_kdamonds back to 0.
    assert_eq!(rd(&a.join("kdamonds/nr_kdamonds")), "0");
    assert!(!a.join("kdamonds/0").exists());
    let log = k.log.borrow();
    assert!(log
        .iter()
        .any(|(p, v)| p == "kdamonds/0/state" && v == "off"));
}

/// `fit_regions`: the minimum follows mapped size / cap within the configured minimum and
/// `MAX_FIT_REGIONS`, the maximum stays at least twice it, min <= max holds after every single
/// write (the order flips when lowering), a running kdamond gets a commit, and small changes
/// are not written.
#[test]
fn regions_are_fitted_to_the_targets_size_in_an_order_the_kernel_accepts() {
    let (t, k) = setup();
    let a = admin(&t);
    let nr = a.join("kdamonds/0/contexts/0/monitoring_attrs/nr_regions");
    let cfg = DamonConfig {
        min_regions: 10,
        max_regions: 1000,
        ..DamonConfig::default()
    };
    let mut m = DamonMonitor::new(&k, &t.path().join("sys"), cfg).unwrap();
    m.set_targets(&[100]).unwrap();
    let mib = 1u64 << 20;
    let writes = |k: &FakeKernel| -> Vec<(String, String)> {
        k.log
            .borrow()
            .iter()
            .filter(|(p, _)| p.contains("nr_regions/") || p.ends_with("/state"))
            .cloned()
            .collect()
    };
    k.log.borrow_mut().clear();
    // 1200 MiB at a 2 MiB cap: 600 regions, max 1200.
    assert!(m.fit_regions(1200 * mib, 2 * mib).unwrap());
    assert_eq!(m.nr_regions(), (600, 1200));
    assert_eq!(
        (rd(&nr.join("min")), rd(&nr.join("max"))),
        ("600".into(), "1200".into())
    );
    let w = writes(&k);
    let at = |f: &str| w.iter().position(|(p, _)| p.ends_with(f)).unwrap();
    assert!(
        at("nr_regions/max") < at("nr_regions/min"),
        "raising: max first: {w:?}"
    );
    assert_eq!(w.last().unwrap().1, "commit");
    // 10 % more: not worth a commit.
    k.log.borrow_mut().clear();
    assert!(!m.fit_regions(1320 * mib, 2 * mib).unwrap());
    assert!(writes(&k).is_empty());
    // Far more than the cap allows: MAX_FIT_REGIONS.
    assert!(m.fit_regions(100_000 * mib, 2 * mib).unwrap());
    assert_eq!(m.nr_regions(), (MAX_FIT_REGIONS, 2 * MAX_FIT_REGIONS));
    // Shrunk to almost nothing: back to the configured minimum, the maximum never below the
    // configured one; lowering writes min first.
    k.log.borrow_mut().clear();
    assert!(m.fit_regions(4 * mib, 2 * mib).unwrap());
    assert_eq!(m.nr_regions(), (10, 1000));
    let w = writes(&k);
    let at = |f: &str| w.iter().position(|(p, _)| p.ends_with(f)).unwrap();
    assert!(
        at("nr_regions/min") < at("nr_regions/max"),
        "lowering: min first: {w:?}"
    );
    // Off: a zero cap writes nothing.
    assert!(!m.fit_regions(1200 * mib, 0).unwrap());
}

#[test]
fn refuses_someone_elses_running_kdamond() {
    let (t, k) = setup();
    let a = admin(&t);
    let sys = t.path().join("sys");
    {
        let mut theirs = DamonMonitor::new(&k, &sys, DamonConfig::default()).unwrap();
        theirs.set_targets(&[300]).unwrap();
        let err = DamonMonitor::new(&k, &sys, DamonConfig::default()).unwrap_err();
        assert!(
            matches!(&err, DamonError::Busy { index: 0, pid } if pid == "4321"),
            "{err}"
        );
        // Untouched.
        assert_eq!(rd(&a.join("kdamonds/0/state")), "on");
        assert_eq!(
            rd(&a.join("kdamonds/0/contexts/0/targets/0/pid_target")),
            "300"
        );
        let st = probe_with(&&k, &sys, &t.path().join("proc"));
        assert!(!st.available);
        std::mem::forget(theirs); // someone else's: must stay on
    }
    assert_eq!(rd(&a.join("kdamonds/0/state")), "on");
}

#[test]
fn idle_configured_kdamonds_need_take_over() {
    let (t, k) = setup();
    let a = admin(&t);
    let sys = t.path().join("sys");
    (&k).write(&a.join("kdamonds/nr_kdamonds"), "2").unwrap();
    let err = DamonMonitor::new(&k, &sys, DamonConfig::default()).unwrap_err();
    assert!(matches!(err, DamonError::Configured { count: 2 }), "{err}");
    let cfg = DamonConfig {
        take_over_idle: true,
        ..DamonConfig::default()
    };
    let mut m = DamonMonitor::new(&k, &sys, cfg).unwrap();
    assert_eq!(rd(&a.join("kdamonds/nr_kdamonds")), "1");
    m.stop().unwrap();
    // Given back the old count.
    assert_eq!(rd(&a.join("kdamonds/nr_kdamonds")), "2");
    m.stop().unwrap();
}

#[test]
fn exited_targets_stop_the_kdamond_without_error() {
    let (t, k) = setup();
    let a = admin(&t);
    let mut m = DamonMonitor::new(&k, &t.path().join("sys"), DamonConfig::default()).unwrap();
    m.set_targets(&[100]).unwrap();
    // The kernel stops a vaddr kdamond whose targets are all gone.
    put(&a.join("kdamonds/0/state"), "off\n");
    let (regions, stats) = m.collect(Nanos(3)).unwrap();
    assert!(regions.is_empty());
    assert!(stats.kdamond_stopped);
    assert!(!m.is_on());
    // A dead pid on restart is the kernel's EINVAL, reported with the file.
    let err = m.set_targets(&[999]).unwrap_err();
    assert!(err.to_string().contains("kdamonds/0/state"), "{err}");
}

#[test]
fn empty_target_set_turns_monitoring_off() {
    let (t, k) = setup();
    let a = admin(&t);
    let mut m = DamonMonitor::new(&k, &t.path().join("sys"), DamonConfig::default()).unwrap();
    m.set_targets(&[100]).unwrap();
    m.set_targets(&[]).unwrap();
    assert!(!m.is_on());
    assert_eq!(rd(&a.join("kdamonds/0/state")), "off");
    assert_eq!(m.collect(Nanos(0)).unwrap().0, vec![]);
}

#[test]
fn probe_without_damon_names_the_config() {
    let t = tempfile::tempdir().unwrap();
    let st = probe_with(&RealFs, &t.path().join("sys"), &t.path().join("proc"));
    assert!(!st.available);
    assert!(st.reason.contains("CONFIG_DAMON_SYSFS"), "{}", st.reason);
    let err = DamonMonitor::new(RealFs, &t.path().join("sys"), DamonConfig::default()).unwrap_err();
    assert!(matches!(err, DamonError::Unavailable { .. }));
}

fn goal() -> IntervalsGoal {
    IntervalsGoal {
        access_bp: 400,
        aggrs: 3,
        min_sample_us: 5_000,
        max_sample_us: 100_000,
    }
}

#[test]
fn userspace_tuning_grows_the_intervals_when_too_little_is_seen_and_commits() {
    let (t, k) = setup();
    let a = admin(&t);
    let cfg = DamonConfig {
        intervals_goal: Some(goal()),
        ..DamonConfig::default()
    };
    let mut m = DamonMonitor::new(&k, &t.path().join("sys"), cfg).unwrap();
    assert_eq!(
        m.tuning(),
        IntervalsTuning::Userspace,
        "6.12: no intervals_goal dir"
    );
    m.set_targets(&[100]).unwrap();
    // Nothing accessed in 1 GiB monitored: the score is 0, the intervals double.
    assert!(m.tune(Nanos::from_millis(0), &[], 1 << 30).unwrap());
    assert_eq!(m.intervals(), (10_000, 200_000));
    let iv = a.join("kdamonds/0/contexts/0/monitoring_attrs/intervals");
    assert_eq!(rd(&iv.join("sample_us")), "10000");
    assert_eq!(rd(&iv.join("aggr_us")), "200000");
    let writes: Vec<String> = k
        .log
        .borrow()
        .iter()
        .map(|(p, v)| format!("{p}={v}"))
        .collect();
    let n = writes.len();
    assert!(
        writes[n - 3].ends_with("aggr_us=200000"),
        "grow aggregation first: {writes:?}"
    );
    assert!(writes[n - 1].ends_with("state=commit"));
    // Not again before `aggrs` aggregation intervals (3 x 200 ms) have passed.
    assert!(!m.tune(Nanos::from_millis(500), &[], 1 << 30).unwrap());
    // Everything accessed in every sample: far over the goal, the intervals halve, and
    // never below the minimum.
    let hot = DamonRegion {
        pid: 100,
        start: 0,
        end: 1 << 30,
        nr_accesses: 20,
        age: 0,
        time: Nanos(0),
    };
    let mut now = 1000;
    for _ in 0..5 {
        m.tune(Nanos::from_millis(now), &[hot], 1 << 30).unwrap();
        now += 1000;
    }
    assert_eq!(m.intervals(), (5_000, 100_000));
}

#[test]
fn kernel_tuning_is_configured_and_read_back_where_the_kernel_has_it() {
    let (t, k) = setup();
    let a = admin(&t);
    // A 6.15+ kernel: intervals_goal exists in each context.
    k.intervals_goal.set(true);
    let g = a.join("kdamonds/0/contexts/0/monitoring_attrs/intervals/intervals_goal");
    let cfg = DamonConfig {
        intervals_goal: Some(goal()),
        ..DamonConfig::default()
    };
    let mut m = DamonMonitor::new(&k, &t.path().join("sys"), cfg).unwrap();
    assert_eq!(m.tuning(), IntervalsTuning::Kernel);
    assert_eq!(rd(&g.join("access_bp")), "400");
    assert_eq!(rd(&g.join("aggrs")), "3");
    assert_eq!(rd(&g.join("max_sample_us")), "100000");
    m.set_targets(&[100]).unwrap();
    assert!(m.tune(Nanos::from_millis(0), &[], 1 << 30).unwrap());
    assert_eq!(m.intervals(), (20_000, 400_000), "what the kernel tuned");
}

#[test]
fn a_restart_after_sigkill_takes_its_own_kdamond_over_and_no_one_elses() {
    use tierd_linux::source::damon::LeftBehind;
    let (t, k) = setup();
    let a = admin(&t);
    let sys = t.path().join("sys");
    k.live.borrow_mut().push(300);
    // The first tierd runs its kdamond, then is killed: nothing is handed back.
    let mut first = DamonMonitor::new(&k, &sys, DamonConfig::default()).unwrap();
    first.set_targets(&[300]).unwrap();
    assert_eq!(first.on_count(), 1);
    let left = first.left_behind().expect("on: a marker can be written");
    assert_eq!(
        left,
        LeftBehind {
            kdamond_pid: 4321,
            prev_nr_kdamonds: 0
        }
    );
    std::mem::forget(first); // SIGKILL: no Drop
    assert_eq!(rd(&a.join("kdamonds/0/state")), "on");
    // Without the marker the restart refuses it, as before.
    assert!(matches!(
        DamonMonitor::new(&k, &sys, DamonConfig::default()),
        Err(DamonError::Busy { .. })
    ));
    // A marker naming another kdamond thread does not make it ours.
    let wrong = LeftBehind {
        kdamond_pid: 999,
        prev_nr_kdamonds: 0,
    };
    assert!(matches!(
        DamonMonitor::take_over(&k, &sys, DamonConfig::default(), Some(wrong)),
        Err(DamonError::Busy { .. })
    ));
    assert_eq!(rd(&a.join("kdamonds/0/state")), "on", "untouched");
    // With the marker: stopped, configured afresh, and monitoring resumes.
    let mut second = DamonMonitor::take_over(&k, &sys, DamonConfig::default(), Some(left)).unwrap();
    assert!(second.took_over());
    assert_eq!(rd(&a.join("kdamonds/0/state")), "off");
    second.set_targets(&[300]).unwrap();
    assert_eq!(rd(&a.join("kdamonds/0/state")), "on");
    second.stop().unwrap();
    assert_eq!(
        rd(&a.join("kdamonds/nr_kdamonds")),
        "0",
        "the old count is restored"
    );
}

#[test]
fn a_restart_takes_over_a_kdamond_that_stopped_by_itself_meanwhile() {
    let (t, k) = setup();
    let a = admin(&t);
    let sys = t.path().join("sys");
    k.live.borrow_mut().push(300);
    let mut first = DamonMonitor::new(&k, &sys, DamonConfig::default()).unwrap();
    first.set_targets(&[300]).unwrap();
    let left = first.left_behind().unwrap();
    std::mem::forget(first);
    // Its targets exited: DAMON stopped the kdamond; the configuration stays.
    (&k).write(&a.join("kdamonds/0/state"), "off").unwrap();
    assert!(matches!(
        DamonMonitor::new(&k, &sys, DamonConfig::default()),
        Err(DamonError::Configured { count: 1 })
    ));
    let m = DamonMonitor::take_over(&k, &sys, DamonConfig::default(), Some(left)).unwrap();
    assert!(m.took_over());
    drop(m);
    assert_eq!(
        rd(&a.join("kdamonds/nr_kdamonds")),
        left.prev_nr_kdamonds.to_string()
    );
}

/// The tracefs instance tierd would `mkdir` (pre-made here, as after an unclean exit: a
/// plain directory cannot make the kernel's files on mkdir).
fn trace_instance(t: &tempfile::TempDir) -> PathBuf {
    let inst = t.path().join("sys/kernel/tracing/instances/tierd");
    for f in [
        "events/damon/damon_aggregated/enable",
        "events/damon/damon_aggregated/filter",
        "buffer_size_kb",
        "tracing_on",
        "trace_pipe",
        "set_event",
    ] {
        put(&inst.join(f), "");
    }
    put(&inst.join("options/record-cmd"), "1");
    put(&inst.join("../../set_event"), "");
    inst
}

/// Appends one aggregation of every target of kdamond 0, as `kdamond_reset_aggregated()`
/// emits it (all regions, accessed or not, target after target), from task `task`;
/// `only_first`: just the first line, as a buffer read mid-aggregation.
fn emit_aggregation(k: &FakeKernel, inst: &Path, task: u32, only_first: bool) {
    use std::io::Write;
    let ctx = k.admin.join("kdamonds/0/contexts/0");
    let nt: usize = rd(&ctx.join("targets/nr_targets")).parse().unwrap();
    let mut text = String::new();
    for ti in 0..nt {
        let pid: u32 = rd(&ctx.join(format!("targets/{ti}/pid_target")))
            .parse()
            .unwrap();
        let view = k.view.borrow();
        let regions = view.get(&pid).cloned().unwrap_or_default();
        for (i, r) in regions.iter().enumerate() {
            if only_first && (i > 0 || ti > 0) {
                break;
            }
            text.push_str(&format!(
                "       kdamond.0-{task}    [001] ..... 100.{ti:06}: damon_aggregated: \
                 target_id={ti} nr_regions={} {}-{}: {} {}\n",
                regions.len(),
                r.0,
                r.1,
                r.2,
                r.3
            ));
        }
    }
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(inst.join("trace_pipe"))
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn tried_region_updates(k: &FakeKernel) -> usize {
    k.log
        .borrow()
        .iter()
        .filter(|(_, v)| v == "update_schemes_tried_regions")
        .count()
}

#[test]
fn regions_come_from_the_tracepoint_whole_aggregations_only_and_sysfs_when_it_stays_silent() {
    let (t, k) = setup();
    let sys = t.path().join("sys");
    let cfg = DamonConfig {
        min_nr_accesses: 1,
        ..DamonConfig::default()
    };
    let mut m = DamonMonitor::new(&k, &sys, cfg).unwrap();
    // No tracefs yet: a clear error, sysfs stays.
    let e = m.read_from_trace(&sys).unwrap_err();
    assert!(matches!(e, DamonError::NoTracepoint { .. }), "{e}");
    let inst = trace_instance(&t);
    assert_eq!(m.read_from_trace(&sys).unwrap(), inst);
    assert_eq!(rd(&inst.join("buffer_size_kb")), "256");
    m.set_targets(&[100, 200]).unwrap();

    // First read: follows the kdamond's thread, nothing aggregated yet.
    let (r, s) = m.collect(Nanos(0)).unwrap();
    assert!(r.is_empty() && s.stale && !s.trace_fallback);
    // The kdamond's events only, by the event's filter, not the instance's set_event_pid
    // (which hooks every context switch).
    assert_eq!(
        rd(&inst.join("events/damon/damon_aggregated/filter")),
        "common_pid == 4321"
    );
    assert!(!inst.join("set_event_pid").exists());
    // Nobody else traces: no task names, so no probe on the context switch either.
    assert_eq!(rd(&inst.join("options/record-cmd")), "0");
    assert_eq!(rd(&inst.join("events/damon/damon_aggregated/enable")), "1");

    // One aggregation (and a line of someone else's kdamond): pids by target index, the
    // region below min_nr_accesses left out, no sysfs read-back.
    emit_aggregation(&k, &inst, 999, false);
    emit_aggregation(&k, &inst, 4321, false);
    let (r, s) = m.collect(Nanos(1_000)).unwrap();
    assert!(!s.stale && !s.trace_fallback);
    let got: Vec<(u32, u64, u64, u64, u64)> = r
        .iter()
        .map(|r| (r.pid, r.start, r.end, r.nr_accesses, r.age))
        .collect();
    assert_eq!(
        got,
        vec![(100, 0x1000, 0x5000, 7, 3), (200, 0x1000, 0x2000, 2, 0)]
    );
    assert_eq!(tried_region_updates(&k), 0);
    let ts = m.trace_stats().unwrap();
    assert_eq!((ts.aggregations, ts.foreign), (2, 3));

    // Half an aggregation is not used; after three aggregation intervals (100 ms each)
    // without a whole one, one read goes through sysfs.
    emit_aggregation(&k, &inst, 4321, true);
    let (r, s) = m.collect(Nanos(2_000)).unwrap();
    assert!(r.is_empty() && s.stale);
    let (r, s) = m.collect(Nanos(400_000_000)).unwrap();
    assert!(s.trace_fallback && !s.stale);
    assert_eq!(r.len(), 2);
    assert_eq!(tried_region_updates(&k), 1);

    // A target change discards what was emitted under the old order.
    emit_aggregation(&k, &inst, 4321, false);
    m.set_targets(&[200]).unwrap();
    let (r, s) = m.collect(Nanos(400_001_000)).unwrap();
    assert!(r.is_empty() && s.stale);
    emit_aggregation(&k, &inst, 4321, false);
    let (r, _) = m.collect(Nanos(400_002_000)).unwrap();
    assert_eq!(r.iter().map(|r| r.pid).collect::<Vec<_>>(), vec![200]);

    drop(m);
    assert_eq!(rd(&inst.join("events/damon/damon_aggregated/enable")), "0");
}
