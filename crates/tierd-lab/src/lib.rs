//! # tierd-lab: tierd against the kernel's own promotion, measured in a tiered guest
//!
//! The simulator compares mechanisms in a model; the lab compares them on a real kernel.
//! Each experiment boots the Debian 6.12 guest of `tierd-vm` (node 1, or node 2 in the
//! three-node machine, is CPU-less and slower per HMAT, so the kernel puts it in a lower
//! tier), places the project's workload on the slow node, starts one mechanism (no
//! promotion, `numa_balancing=2`, a DAMOS `migrate_hot` scheme, or tierd) and samples every
//! second what the kernel says: `numa_maps` of each part of the workload, `/proc/vmstat`,
//! and the CPU time of the workload, the promoter and kdamond. One fresh guest per
//! mechanism.
//!
//! Layout: [`mechanism`] (how each mechanism is started and stopped in the guest),
//! [`experiment`](mod@experiment) (the experiments), [`run`] (guest script, boot, console parsing),
//! [`summary`] (the seed-style row, table, CSV). `tierd lab` is the command.
//!
//! What the guest cannot show: its nodes do not differ in speed (HMAT only advertises the
//! slow tier; under TCG an access costs the same on both), so throughput differences between
//! rows are overhead (faults, migration, scanning), not placement.

use std::path::{Path, PathBuf};

use serde::Serialize;
use tierd_vm::{binaries, default_cache_dir, Kernel};

pub mod apps;
pub mod chaos;
pub mod experiment;
pub mod mechanism;
pub mod run;
pub mod scale;
pub mod summary;

pub use experiment::{Experiment, Thp};
pub use mechanism::Mechanism;
pub use run::RunData;
pub use summary::Summary;
pub use tierd_vm::KernelChoice;

/// What can go wrong in the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The guest harness failed (kernel fetch, build, boot, timeout).
    #[error(transparent)]
    Guest(#[from] tierd_vm::Error),
    /// A run's console could not be read as measurements.
    #[error("parsing the guest's output: {0}")]
    Parse(String),
    /// No experiment or mechanism has this name.
    #[error("unknown {what} {name:?}; known: {known}")]
    Unknown {
        /// Experiment or run.
        what: &'static str,
        /// The name given.
        name: String,
        /// The names there are.
        known: String,
    },
}

/// What a lab figure depends on besides the mechanism: the host that ran the TCG guest (its
/// speed sets the workload's access rate) and the guest kernel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct HostInfo {
    /// `model name` from the host's `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Online CPUs of the host.
    pub cpus: usize,
    /// The host's 1-minute load average when the experiment started (another busy process
    /// slows TCG down).
    pub loadavg_1m: f64,
    /// Single-thread speed index: millions of iterations per second of a fixed integer loop
    /// (xorshift64), timed on the host before the experiment. Compare rows from different
    /// hosts by it, and by the workload's accesses per hot page per second.
    pub speed_mops: f64,
    /// `uname -r` of the guest kernel.
    pub guest_kernel: String,
}

impl HostInfo {
    /// Reads the host and times the speed loop (about 0.1-0.5 s).
    #[must_use]
    pub fn measure(guest_kernel: &str) -> HostInfo {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|r| r.split_once(':'))
            .map_or_else(|| "unknown".to_string(), |(_, m)| m.trim().to_string());
        let loadavg_1m = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        HostInfo {
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            loadavg_1m,
            speed_mops: speed_index(),
            guest_kernel: guest_kernel.to_string(),
        }
    }

    /// One line for tables.
    #[must_use]
    pub fn line(&self) -> String {
        format!(
            "host: {} ({} CPUs), speed index {:.0} Mops/s, load {:.2}; guest kernel {}",
            self.cpu_model, self.cpus, self.speed_mops, self.loadavg_1m, self.guest_kernel
        )
    }
}

/// Millions of xorshift64 steps per second on one host thread: the best of three timings
/// of 50 M steps (the best, because another process can only slow a timing down).
#[allow(clippy::cast_precision_loss)]
fn speed_index() -> f64 {
    const STEPS: u64 = 50_000_000;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..STEPS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
        best = best.min(t.elapsed().as_secs_f64());
    }
    STEPS as f64 / best.max(1e-9) / 1e6
}

/// The result of one experiment.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentResult {
    /// The experiment.
    pub experiment: Experiment,
    /// The host and guest kernel it ran on.
    pub host: HostInfo,
    /// One row per run.
    pub rows: Vec<Summary>,
    /// The measurements behind each row, by row id.
    pub runs: Vec<(String, RunData)>,
    /// tierd against the best kernel mechanism, per metric ([`summary::versus`]).
    pub versus: Vec<summary::Verdict>,
}

/// The static binaries and the kernel a lab needs, built or fetched once.
#[derive(Debug, Clone)]
pub struct LabEnv {
    /// The guest kernel.
    pub kernel: Kernel,
    /// Directory with static `tierd` and `tierd-workload`.
    pub bins: PathBuf,
    /// Where guests keep their files.
    pub work_dir: PathBuf,
    /// Where each tierd row's trace goes, as `<experiment>-<thp>-<row>.trace.tgz`
    /// (`tar -xzf` it, then `tierd replay DIR`): `$TIERD_LAB_TRACES`, else
    /// `target/lab-traces` of the workspace.
    pub traces: PathBuf,
}

impl LabEnv {
    /// Fetches the kernel (cached; `$TIERD_LAB_KERNEL`, else the newest) and builds the static
    /// binaries from `workspace`.
    ///
    /// # Errors
    /// [`LabError::Guest`] when either fails.
    pub fn prepare(workspace: &Path) -> Result<LabEnv, LabError> {
        Self::prepare_with(workspace, KernelChoice::from_env()?)
    }

    /// [`LabEnv::prepare`] with the guest kernel chosen by the caller.
    ///
    /// # Errors
    /// [`LabError::Guest`] when the kernel fetch or the build fails.
    pub fn prepare_with(workspace: &Path, choice: KernelChoice) -> Result<LabEnv, LabError> {
        let kernel = Kernel::fetch_choice(&default_cache_dir(), choice)?;
        let bins = binaries::build_static(workspace, &["tierd", "tierd-workload"])?;
        let work_dir = std::env::temp_dir().join(format!("tierd-lab-{}", std::process::id()));
        let traces = std::env::var_os("TIERD_LAB_TRACES")
            .map_or_else(|| workspace.join("target/lab-traces"), PathBuf::from);
        Ok(LabEnv {
            kernel,
            bins,
            work_dir,
            traces,
        })
    }
}

/// Runs an experiment's mechanisms (all, or those whose row ids are in `only`), calling
/// `progress` with each row as it completes.
///
/// # Errors
/// [`LabError`] from the first run that fails.
pub fn run_experiment(
    env: &LabEnv,
    exp: &Experiment,
    only: &[String],
    progress: &mut dyn FnMut(&Summary),
) -> Result<ExperimentResult, LabError> {
    for id in only {
        if !exp.runs.iter().any(|(r, _)| r == id) {
            return Err(LabError::Unknown {
                what: "run",
                name: id.clone(),
                known: exp
                    .runs
                    .iter()
                    .map(|(r, _)| r.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    let host = HostInfo::measure(&env.kernel.version);
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    for (id, mech) in &exp.runs {
        if !only.is_empty() && !only.contains(id) {
            continue;
        }
        // A mechanism the guest kernel is too old for is a row that says so, not a guest
        // boot (its script would find the sysfs files missing and skip too).
        if let Some((major, minor)) = mech.min_kernel() {
            if env.kernel.major_minor() < (major, minor) {
                let row = Summary {
                    id: id.clone(),
                    mechanism: mech.name().to_string(),
                    thp: exp.thp,
                    skipped: Some(format!(
                        "needs kernel {major}.{minor}+, the guest has {}",
                        env.kernel.version
                    )),
                    ..Summary::default()
                };
                progress(&row);
                rows.push(row);
                runs.push((id.clone(), RunData::default()));
                continue;
            }
        }
        let dir = env.work_dir.join(format!("{}-{}-{id}", exp.id, exp.thp));
        // A guest that hangs or a run that breaks is a result too: record it and go on, so
        // one bad row does not cost the rest of a half-hour lab.
        let outcome = run::run_one(&env.kernel, &env.bins, exp, mech, &dir);
        std::fs::remove_dir_all(&dir).ok();
        let (row, data) = match outcome {
            Ok((mut data, _console)) => {
                if let Some(tgz) = data.trace_tgz.take() {
                    let path = env
                        .traces
                        .join(format!("{}-{}-{id}.trace.tgz", exp.id, exp.thp));
                    let saved = std::fs::create_dir_all(&env.traces)
                        .and_then(|()| std::fs::write(&path, tgz));
                    data.notes.push(match saved {
                        Ok(()) => format!("TIERD_TRACE {}", path.display()),
                        Err(e) => format!("TIERD_TRACE not saved: {}: {e}", path.display()),
                    });
                }
                (summary::summarize(exp, id, mech.name(), &data), data)
            }
            Err(e) => (
                Summary {
                    id: id.clone(),
                    mechanism: mech.name().to_string(),
                    error: Some(e.to_string()),
                    ..Summary::default()
                },
                RunData::default(),
            ),
        };
        progress(&row);
        rows.push(row);
        runs.push((id.clone(), data));
    }
    let versus = summary::versus(exp, &rows, &host.guest_kernel);
    Ok(ExperimentResult {
        experiment: exp.clone(),
        host,
        rows,
        runs,
        versus,
    })
}

/// The experiments by id; `quick` gives the short versions CI runs.
///
/// # Errors
/// [`LabError::Unknown`] for an unknown id.
pub fn experiment(id: &str, quick: bool) -> Result<Experiment, LabError> {
    match id {
        "a" => Ok(experiment::experiment_a(quick)),
        "integrity" => Ok(experiment::experiment_integrity(quick)),
        "churn" => Ok(experiment::experiment_churn()),
        "flat" => Ok(experiment::experiment_flat(quick)),
        "idle" => Ok(experiment::experiment_idle(quick)),
        "three-node" => Ok(experiment::experiment_three_node()),
        "three-node-procs" => Ok(experiment::experiment_three_node_procs()),
        "mempolicy" => Ok(experiment::experiment_mempolicy()),
        "mempolicy-balancing" => Ok(experiment::experiment_mempolicy_balancing()),
        "memcached" => Ok(apps::experiment_server(apps::Server::Memcached, quick)),
        "redis" => Ok(apps::experiment_server(apps::Server::Redis, quick)),
        "memcached-pm" => Ok(apps::experiment_memcached_pm(false)),
        "memcached-pm-balancing" => Ok(apps::experiment_memcached_pm(true)),
        _ => Err(LabError::Unknown {
            what: "experiment",
            name: id.to_string(),
            // chaos is run on its own (`tierd lab chaos`, [`chaos`]), not with the others.
            known: format!("{}, chaos", EXPERIMENTS.join(", ")),
        }),
    }
}

/// An experiment (as [`experiment()`]) with the guest's THP mode set (see
/// [`Experiment::with_thp`]).
///
/// # Errors
/// [`LabError::Unknown`] for an unknown id.
pub fn experiment_thp(id: &str, quick: bool, thp: Thp) -> Result<Experiment, LabError> {
    experiment(id, quick).map(|e| e.with_thp(thp))
}

/// Every experiment id, in the order `tierd lab` runs them.
pub const EXPERIMENTS: &[&str] = &[
    "a",
    "churn",
    "three-node",
    "three-node-procs",
    "mempolicy",
    "mempolicy-balancing",
    "integrity",
    "memcached",
    "redis",
    "memcached-pm",
    "memcached-pm-balancing",
    "flat",
    "idle",
];
