//! The engine's configuration: pghot's tunables plus tierd's demotion, ping-pong and fairness
//! settings, with the kernel's defaults and ranges.
//!
//! Defaults and ranges come from mm/pghot.c, include/linux/pghot.h and
//! Documentation/admin-guide/mm/pghot.rst:
//!
//! | knob | default | range |
//! |---|---|---|
//! | `freq_threshold` | 2 | 1-3 default mode, 1-7 precise |
//! | `freq_window_ms` | 3000 default / 5000 precise | 1000 - 3968 / 16383 |
//! | `promote_rate_limit_mbps` | 65536 | kernel >= 0; tierd 1 - 2^24 (0 would promote nothing) |
//! | `interval_ms` (`kmigrated_sleep_ms`) | 100 | 50-1000 |
//! | `batch_nr` (`kmigrated_batch_nr`) | 512 | 64-1024 |
//!
//! tierd's own knobs: `heat_cooling_ms` 100 - 3600000, `pingpong_window_ms` 0 - 86400000 (0:
//! no ping-pong accounting), `store_idle_ms` 1000 - 86400000, `watermark_scale_factor` 1 -
//! 3000 (the sysctl's range), demotion watermarks `low < high <= 1000` per mille. Every
//! range keeps its ms-to-ns conversion inside a u64.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::hotness::HotnessMode;
use crate::sources::{SourceKind, SourceMask};
use crate::types::NodeId;

/// A configuration value out of its range. Each variant names the key.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A numeric knob outside the kernel's range.
    #[error("{key} = {value} is out of range: must be within {min}..={max}")]
    OutOfRange {
        /// The configuration key.
        key: &'static str,
        /// The value given.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// The demotion watermarks are not ordered.
    #[error(
        "demotion.low_free_permille ({low}) must be below demotion.high_free_permille ({high}), \
         and high at most 1000"
    )]
    Watermarks {
        /// Low watermark, per mille of capacity.
        low: u32,
        /// High watermark, per mille of capacity.
        high: u32,
    },
    /// The promotion target is not a top-tier node of the topology.
    #[error("target_nid = {0} is not a top-tier node")]
    TargetNotToptier(NodeId),
    /// Idle demotion is on but no enabled source sees accesses to fast-tier pages (hint faults
    /// in tiering mode fire only on slow pages): every fast page would look idle.
    #[error(
        "demotion.idle_after_ms needs a source that sees fast-tier pages (hardware samples or \
         accessed-bit scans: damon, idle, perf); with hint faults alone every fast page looks idle"
    )]
    IdleDemotionBlind,
}

impl ConfigError {
    /// The key the error is about (`demotion.low_free_permille` for the watermarks), as it
    /// appears in the message.
    #[must_use]
    pub fn key(&self) -> &'static str {
        match self {
            ConfigError::OutOfRange { key, .. } => key,
            ConfigError::Watermarks { .. } => "demotion.low_free_permille",
            ConfigError::TargetNotToptier(_) => "target_nid",
            ConfigError::IdleDemotionBlind => "demotion.idle_after_ms",
        }
    }
}

/// How the promoter decides that a ready page is hot enough.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdMode {
    /// tierd's default: promote the hottest pages the fast tier has room for, whatever their
    /// absolute access rate (a histogram of decayed access counts, as Memtis does; see
    /// [`crate::hotness::heat`]). A page must still be ready (seen since its last
    /// consideration), and the rate limit still applies.
    #[default]
    Relative,
    /// The kernel's rule (pghot + kernel/sched/fair.c): `freq_threshold` accesses within the
    /// window, the latency threshold adjusted to the rate limit, and the free-space bypass.
    Fixed,
}

/// The default bound on idle demotion per fast node, MB/s: 64 MB/s moves 1 GB of idle memory
/// in about 16 s, a small share of one core's `move_pages(2)` throughput (docs/lab.md
/// measures ~150 MiB/s under TCG), so idle demotion stays background work.
pub const DEFAULT_IDLE_RATE_LIMIT_MBPS: u64 = 64;

/// Demotion of cold pages from fast nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemotionConfig {
    /// Plan demotions at all.
    pub enabled: bool,
    /// Start demoting from a fast node when its free memory falls below this, per mille of its
    /// capacity.
    pub low_free_permille: u32,
    /// Demote until free memory reaches this, per mille of capacity.
    pub high_free_permille: u32,
    /// Demote fast-tier pages no source has seen accessed for this long, ms, even while the
    /// node has room: the fast tier keeps room for what comes next instead of waiting for
    /// pressure (memtierd, damo and HMSDK demote idle memory the same way). 0, the default,
    /// is off; otherwise 1000..=86400000.
    pub idle_after_ms: u64,
    /// Most idle demotion per fast node, MB/s (bounded so that a process going quiet all at
    /// once does not turn into a migration storm).
    pub idle_rate_limit_mbps: u64,
}

impl Default for DemotionConfig {
    /// Start below 2 % free, stop at 5 % free: tierd's choice. The kernel's own watermarks are
    /// far tighter (`watermark_scale_factor` 10 = 0.1 % per step), but a userspace demoter
    /// that runs every 100 ms needs headroom so that allocations between its passes do not hit
    /// direct reclaim.
    fn default() -> Self {
        DemotionConfig {
            enabled: true,
            low_free_permille: 20,
            high_free_permille: 50,
            idle_after_ms: 0,
            idle_rate_limit_mbps: DEFAULT_IDLE_RATE_LIMIT_MBPS,
        }
    }
}

/// The engine's configuration. Unknown keys are refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Record format and target rule: `default` (1 byte, one target node) or `precise`
    /// (4 bytes, promote to the accessing node).
    pub mode: HotnessMode,
    /// The fixed promotion target (`pghot_target_nid`); `None` = node 0 if top tier, else the
    /// first top-tier node. In precise mode, the target for sources that do not know the
    /// accessing node.
    pub target_nid: Option<NodeId>,
    /// `relative` (tierd: the hottest pages that fit) or `fixed` (the kernel's threshold).
    pub threshold: ThresholdMode,
    /// Relative mode: every page's decayed access count halves this often, ms.
    pub heat_cooling_ms: u64,
    /// Accesses within the window that make a page hot (`pghot_freq_threshold`). In relative
    /// mode: sightings within the window before a page is a candidate at all (a noise
    /// filter counted in observations, not in their weight, so it does not depend on the
    /// access rate); its heat then decides.
    pub freq_threshold: u8,
    /// The frequency window, ms (`pghot_promote_freq_window_ms`); `None` = the mode's default.
    pub freq_window_ms: Option<u32>,
    /// Per-target-node promotion budget, MB/s (`pghot_promote_rate_limit_MBps`).
    pub promote_rate_limit_mbps: u64,
    /// How often the promoter runs, ms (`kmigrated_sleep_ms`).
    pub interval_ms: u32,
    /// Most folios in one migration batch (`kmigrated_batch_nr`, which counts folios); a batch
    /// also holds at most `batch_nr` × 2 MiB unless one folio is larger (`engine::batch_bytes`).
    pub batch_nr: u32,
    /// Enabled sources (`pghot_enabled_sources`).
    pub sources: SourceMask,
    /// Adjust the hot threshold every 60 s to the rate limit, as the kernel does.
    pub adaptive_threshold: bool,
    /// Demotion settings.
    pub demotion: DemotionConfig,
    /// A page demoted within this many ms of its promotion, or promoted within this many ms of
    /// its demotion, counts as ping-pong.
    pub pingpong_window_ms: u64,
    /// Apply the per-cgroup fast-tier share (memory.low scaled to the fast tier).
    pub cgroup_fairness: bool,
    /// `vm.watermark_scale_factor`, used to estimate a node's promotion watermark when the
    /// backend does not report it.
    pub watermark_scale_factor: u32,
    /// Free hotness-record chunks untouched for this long, ms.
    pub store_idle_ms: u64,
    /// Promote and demote pages of INTERLEAVE and WEIGHTED_INTERLEAVE VMAs. Off by default:
    /// the user spread those pages on purpose, and tierd leaves them where they are
    /// ([`crate::policy::MemPolicy::may_move`]).
    pub move_interleaved: bool,
    /// Where an observation whose source does not know who made the access (DAMON, idle
    /// tracking) is attributed in precise mode: `threads` (the node all of the process's
    /// running threads run on, when there is one; [`AccessingNode`]) or `none` (the target).
    pub accessing_node: AccessingNode,
    /// Whether pages of `MPOL_PREFERRED_MANY` VMAs are promoted only when the policy carries
    /// `MPOL_F_NUMA_BALANCING`, as the kernel does (`follow-flag`), or always (`always`, the
    /// default); [`PreferredMany`].
    pub preferred_many: PreferredMany,
}

/// How an observation without an accessing node gets one (precise mode only: default mode
/// promotes every page to its one target).
///
/// The kernel's NUMA balancing places a task's memory on the node its task runs on: a hint
/// fault is charged to the faulting CPU's node (mm/mempolicy.c `mpol_misplaced()`, `thisnid =
/// numa_node_id()` for the MPOL_F_MORON case), and kernel/sched/fair.c
/// `task_numa_placement()` settles a task's `numa_preferred_nid` on the node its faults come
/// from. An accessed-bit source (DAMON, idle tracking) says a page was used, not by whom, so
/// without attribution every page goes to the one configured target: with two DRAM nodes,
/// half of a node-local process's hot set ends on the wrong one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessingNode {
    /// Attribute to the node the backend says all of the process's recently running threads
    /// run on (`OwnerUpdate::HomeNode`); when its threads span nodes, or the backend cannot
    /// tell, the access stays unattributed and the target applies. The default: a process
    /// whose threads all run on one node (one process per node, as MPI ranks and most
    /// servers are deployed) makes every access from there, so this is what a sampling PMU
    /// would report, at the cost of reading `/proc/PID/task/*/stat` now and then.
    #[default]
    Threads,
    /// Never attribute: every unattributed access promotes to the target.
    None,
}

/// What tierd does with pages of `MPOL_PREFERRED_MANY` VMAs.
///
/// The kernel promotes them only when the policy was set with `MPOL_F_NUMA_BALANCING`
/// (Linux 6.10+, mm/mempolicy.c `sanitize_mpol_flags()` turns the flag into `MPOL_F_MOF |
/// MPOL_F_MORON`; without MPOL_F_MOF, kernel/sched/fair.c `task_numa_work()` skips the VMA
/// (`vma_policy_mof()`), so no hint fault ever asks `mpol_misplaced()` about its pages;
/// Documentation/admin-guide/mm/numa_memory_policy.rst). Either way no page leaves the
/// preferred set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PreferredMany {
    /// Promote into (and inside) the preferred set whether or not the flag is set (the
    /// default). A page of such a VMA sits on a slow node only because the preferred nodes
    /// had no room when it was allocated: `alloc_pages_preferred_many()` (mm/mempolicy.c)
    /// tries the set first and falls back to any node only when it fails. Promoting it
    /// toward the set does what the allocator would have done with room and never overrides
    /// the set the user chose; and a process in tierd's scope was put there by an operator
    /// who asked for tiering.
    #[default]
    Always,
    /// The kernel's rule: promote only with `MPOL_F_NUMA_BALANCING` (`numa_maps` shows
    /// `prefer (many)=balancing:...`); without it tierd leaves the pages where they are (it
    /// still demotes them within the set, as reclaim would).
    FollowFlag,
}

/// The smallest `batch_nr` (`kmigrated_batch_nr`'s range starts here).
pub const MIN_BATCH_NR: u32 = 64;
/// pghot's default-mode frequency window (`PGHOT_DEFAULT_FREQ_WINDOW`, 3 s).
pub const DEFAULT_MODE_WINDOW_MS: u32 = 3000;
/// pghot's precise-mode frequency window (5 s).
pub const PRECISE_MODE_WINDOW_MS: u32 = 5000;
/// Relative mode's cooling period: 2 s, four reads of tierd's DAMON source and twenty
/// promoter passes, so a page's heat reflects the last few seconds; long enough that a page
/// seen once per read keeps a non-zero heat between reads.
pub const DEFAULT_HEAT_COOLING_MS: u64 = 2000;
/// Largest `promote_rate_limit_mbps`: 16 TiB/s per target node.
pub const MAX_RATE_LIMIT_MBPS: u64 = 1 << 24;
/// Smallest frequency window (`PGHOT_FREQ_WINDOW_MIN`).
pub const MIN_WINDOW_MS: u32 = 1000;
/// Largest default-mode window: `0x1F << 7` jiffies, the 5-bit bucketed time range.
pub const MAX_DEFAULT_WINDOW_MS: u32 = 0x1F << 7;
/// Largest precise-mode window: the 14-bit time range.
pub const MAX_PRECISE_WINDOW_MS: u32 = 0x3FFF;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            mode: HotnessMode::Default,
            target_nid: None,
            threshold: ThresholdMode::Relative,
            heat_cooling_ms: DEFAULT_HEAT_COOLING_MS,
            freq_threshold: 2,
            freq_window_ms: None,
            promote_rate_limit_mbps: 65536,
            interval_ms: 100,
            batch_nr: 512,
            sources: SourceMask::ALL,
            adaptive_threshold: true,
            demotion: DemotionConfig::default(),
            pingpong_window_ms: 30_000,
            cgroup_fairness: true,
            watermark_scale_factor: 10,
            store_idle_ms: 60_000,
            move_interleaved: false,
            accessing_node: AccessingNode::Threads,
            preferred_many: PreferredMany::Always,
        }
    }
}

fn check(key: &'static str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            key,
            value,
            min,
            max,
        })
    }
}

impl EngineConfig {
    /// The frequency window in force.
    #[must_use]
    pub fn window_ms(&self) -> u32 {
        self.freq_window_ms.unwrap_or(match self.mode {
            HotnessMode::Default => DEFAULT_MODE_WINDOW_MS,
            HotnessMode::Precise => PRECISE_MODE_WINDOW_MS,
        })
    }

    /// Checks every knob against the kernel's ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (freq_max, window_max) = match self.mode {
            HotnessMode::Default => (3, MAX_DEFAULT_WINDOW_MS),
            HotnessMode::Precise => (7, MAX_PRECISE_WINDOW_MS),
        };
        check(
            "freq_threshold",
            u64::from(self.freq_threshold),
            1,
            freq_max,
        )?;
        check(
            "freq_window_ms",
            u64::from(self.window_ms()),
            u64::from(MIN_WINDOW_MS),
            u64::from(window_max),
        )?;
        check("interval_ms", u64::from(self.interval_ms), 50, 1000)?;
        // 0 is refused rather than read as "off" or "unlimited": the kernel reads 0 as "every
        // candidate is rate limited" (kernel/sched/fair.c numa_promotion_rate_limit():
        // `nr_cand - start >= 0`), i.e. nothing is ever promoted, which nobody means to
        // configure; the ceiling (16 TiB/s per node) is far above any memory bus and keeps
        // the pages-per-second conversion and its multiples exact.
        check(
            "promote_rate_limit_mbps",
            self.promote_rate_limit_mbps,
            1,
            MAX_RATE_LIMIT_MBPS,
        )?;
        check("heat_cooling_ms", self.heat_cooling_ms, 100, 3_600_000)?;
        check(
            "batch_nr",
            u64::from(self.batch_nr),
            u64::from(MIN_BATCH_NR),
            1024,
        )?;
        check(
            "pingpong_window_ms",
            self.pingpong_window_ms,
            0,
            24 * 3600 * 1000,
        )?;
        // Every ms value here is bounded so that its conversion to ns (Nanos::from_millis,
        // ms * 10^6) cannot overflow a u64 (~584 years).
        check("store_idle_ms", self.store_idle_ms, 1000, 24 * 3600 * 1000)?;
        check(
            "watermark_scale_factor",
            u64::from(self.watermark_scale_factor),
            1,
            3000,
        )?;
        let d = self.demotion;
        if d.idle_after_ms != 0 {
            check(
                "demotion.idle_after_ms",
                d.idle_after_ms,
                1000,
                24 * 3600 * 1000,
            )?;
            if !self.sources.contains(SourceKind::HwSample)
                && !self.sources.contains(SourceKind::AccessedBitScan)
            {
                return Err(ConfigError::IdleDemotionBlind);
            }
        }
        check(
            "demotion.idle_rate_limit_mbps",
            d.idle_rate_limit_mbps,
            1,
            MAX_RATE_LIMIT_MBPS,
        )?;
        let d = self.demotion;
        if d.low_free_permille >= d.high_free_permille || d.high_free_permille > 1000 {
            return Err(ConfigError::Watermarks {
                low: d.low_free_permille,
                high: d.high_free_permille,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn defaults_are_the_kernels_and_valid() {
        let c = EngineConfig::default();
        assert_eq!(c.threshold, ThresholdMode::Relative, "tierd's own default");
        assert!(serde_json::from_str::<EngineConfig>(r#"{"threshold": "fixed"}"#).is_ok());
        assert!(serde_json::from_str::<EngineConfig>(r#"{"threshold": "fix"}"#).is_err());
        assert_eq!(c.freq_threshold, 2);
        assert_eq!(c.window_ms(), 3000);
        assert_eq!(c.interval_ms, 100);
        assert_eq!(c.batch_nr, 512);
        assert_eq!(c.promote_rate_limit_mbps, 65536);
        c.validate().unwrap();
        let p = EngineConfig {
            mode: HotnessMode::Precise,
            ..c
        };
        assert_eq!(p.window_ms(), 5000);
        p.validate().unwrap();
    }

    #[test]
    fn idle_demotion_is_off_by_default_and_range_checked() {
        let c = EngineConfig::default();
        assert_eq!(c.demotion.idle_after_ms, 0, "off by default");
        assert_eq!(
            c.demotion.idle_rate_limit_mbps,
            DEFAULT_IDLE_RATE_LIMIT_MBPS
        );
        let with = |ms: u64, mbps: u64| EngineConfig {
            demotion: DemotionConfig {
                idle_after_ms: ms,
                idle_rate_limit_mbps: mbps,
                ..DemotionConfig::default()
            },
            ..EngineConfig::default()
        };
        assert!(with(60_000, 64).validate().is_ok());
        assert!(with(0, 64).validate().is_ok());
        for (ms, mbps, key) in [
            (999, 64, "demotion.idle_after_ms"),
            (24 * 3600 * 1000 + 1, 64, "demotion.idle_after_ms"),
            (60_000, 0, "demotion.idle_rate_limit_mbps"),
        ] {
            let e = with(ms, mbps).validate().unwrap_err();
            assert_eq!(e.key(), key, "{e}");
        }
    }

    #[test]
    fn ranges_depend_on_mode() {
        let c = EngineConfig {
            freq_threshold: 4,
            ..EngineConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err(ConfigError::OutOfRange {
                key: "freq_threshold",
                value: 4,
                min: 1,
                max: 3
            })
        );
        let p = EngineConfig {
            mode: HotnessMode::Precise,
            freq_threshold: 7,
            ..EngineConfig::default()
        };
        p.validate().unwrap();
        let w = EngineConfig {
            freq_window_ms: Some(5000),
            ..EngineConfig::default()
        };
        assert!(matches!(
            w.validate(),
            Err(ConfigError::OutOfRange {
                key: "freq_window_ms",
                max: 3968,
                ..
            })
        ));
        let b = EngineConfig {
            batch_nr: 2048,
            ..EngineConfig::default()
        };
        assert!(b
            .validate()
            .unwrap_err()
            .to_string()
            .contains("batch_nr = 2048"));
        let t0 = EngineConfig {
            freq_threshold: 0,
            ..EngineConfig::default()
        };
        assert!(t0.validate().is_err());
    }

    #[test]
    fn watermarks_must_be_ordered() {
        let mut c = EngineConfig::default();
        c.demotion.low_free_permille = 50;
        c.demotion.high_free_permille = 50;
        assert_eq!(
            c.validate(),
            Err(ConfigError::Watermarks { low: 50, high: 50 })
        );
    }

    #[test]
    fn zero_rate_and_overflowing_durations_are_refused() {
        for (c, key) in [
            (
                EngineConfig {
                    promote_rate_limit_mbps: 0,
                    ..EngineConfig::default()
                },
                "promote_rate_limit_mbps",
            ),
            (
                EngineConfig {
                    promote_rate_limit_mbps: u64::MAX,
                    ..EngineConfig::default()
                },
                "promote_rate_limit_mbps",
            ),
            (
                EngineConfig {
                    store_idle_ms: u64::MAX / 1000,
                    ..EngineConfig::default()
                },
                "store_idle_ms",
            ),
            (
                EngineConfig {
                    pingpong_window_ms: u64::MAX,
                    ..EngineConfig::default()
                },
                "pingpong_window_ms",
            ),
            (
                EngineConfig {
                    heat_cooling_ms: 0,
                    ..EngineConfig::default()
                },
                "heat_cooling_ms",
            ),
            (
                EngineConfig {
                    freq_window_ms: Some(0),
                    ..EngineConfig::default()
                },
                "freq_window_ms",
            ),
            (
                EngineConfig {
                    batch_nr: 0,
                    ..EngineConfig::default()
                },
                "batch_nr",
            ),
        ] {
            let e = c.validate().unwrap_err();
            assert_eq!(e.key(), key);
            assert!(e.to_string().starts_with(key), "{e}");
        }
    }

    /// Every config key an error can name (the property test checks errors name one).
    const KEYS: &[&str] = &[
        "freq_threshold",
        "freq_window_ms",
        "interval_ms",
        "promote_rate_limit_mbps",
        "heat_cooling_ms",
        "batch_nr",
        "pingpong_window_ms",
        "store_idle_ms",
        "watermark_scale_factor",
        "demotion.low_free_permille",
        "target_nid",
    ];

    /// Mostly inside `valid` (so that about a third of the configurations validate and the
    /// engine gets to run), otherwise anywhere in the type, edges and zero included.
    fn knob(valid: std::ops::RangeInclusive<u64>) -> impl Strategy<Value = u64> {
        prop_oneof![18 => valid, 1 => Just(0u64), 1 => any::<u64>()]
    }

    fn knob32(valid: std::ops::RangeInclusive<u32>) -> impl Strategy<Value = u32> {
        prop_oneof![18 => valid, 1 => Just(0u32), 1 => any::<u32>()]
    }

    fn arb_config() -> impl Strategy<Value = EngineConfig> {
        (
            (
                any::<bool>(),
                prop_oneof![18 => 1u8..=3, 1 => any::<u8>()],
                proptest::option::of(knob32(1000..=3968)),
            ),
            (
                knob(1..=MAX_RATE_LIMIT_MBPS),
                knob32(50..=1000),
                knob32(64..=1024),
            ),
            (
                knob(100..=3_600_000),
                knob(0..=86_400_000),
                knob(1000..=86_400_000),
                knob32(1..=3000),
            ),
            (
                knob32(0..=500),
                knob32(501..=1000),
                any::<bool>(),
                proptest::option::weighted(0.2, 0u16..4),
            ),
        )
            .prop_map(
                |(
                    (precise, freq, window),
                    (rate, interval, batch),
                    (cool, pingpong, idle, wsf),
                    (low, high, fixed, target),
                )| {
                    EngineConfig {
                        mode: if precise {
                            HotnessMode::Precise
                        } else {
                            HotnessMode::Default
                        },
                        target_nid: target.map(NodeId),
                        threshold: if fixed {
                            ThresholdMode::Fixed
                        } else {
                            ThresholdMode::Relative
                        },
                        heat_cooling_ms: cool,
                        freq_threshold: freq,
                        freq_window_ms: window,
                        promote_rate_limit_mbps: rate,
                        interval_ms: interval,
                        batch_nr: batch,
                        pingpong_window_ms: pingpong,
                        watermark_scale_factor: wsf,
                        store_idle_ms: idle,
                        demotion: DemotionConfig {
                            enabled: true,
                            low_free_permille: low,
                            high_free_permille: high,
                            ..DemotionConfig::default()
                        },
                        ..EngineConfig::default()
                    }
                },
            )
    }

    /// The property test below is only worth something if many generated configurations
    /// validate (the engine runs) and many do not (the errors are checked).
    #[test]
    fn the_generator_makes_valid_and_invalid_configs() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = arb_config();
        let valid = (0..400)
            .filter(|_| {
                let c = strategy.new_tree(&mut runner).unwrap().current();
                c.validate().is_ok()
            })
            .count();
        assert!((60..=340).contains(&valid), "{valid} of 400 valid");
    }

    proptest! {
        /// A configuration that validates builds an engine that runs (observations, ticks far
        /// apart so every ms knob is converted and compared, plans applied) without a panic;
        /// one that does not is refused with an error naming its key.
        #[test]
        fn valid_configs_run_and_invalid_ones_name_their_key(c in arb_config()) {
            use crate::plan::{NodeUsage, SystemUsage};
            use crate::sources::{Observation, SourceKind};
            use crate::types::{Bytes, Nanos, PageRef, SpaceId, Vpn};
            let topo = crate::topology::two_tier(Bytes::mib(64), Bytes::mib(256));
            match crate::Engine::new(c.clone(), topo.clone()) {
                Err(e) => {
                    let msg = e.to_string();
                    prop_assert!(KEYS.contains(&e.key()), "{}", msg);
                    prop_assert!(msg.contains(e.key()), "{}", msg);
                    prop_assert!(!msg.contains('\n'));
                }
                Ok(mut engine) => {
                    prop_assert!(c.validate().is_ok());
                    let mut usage = SystemUsage::default();
                    for n in topo.nodes() {
                        usage.nodes.insert(n.id, NodeUsage { free: Bytes(n.capacity.0 / 100), promo_watermark: None });
                    }
                    for step in 0..6u64 {
                        let now = Nanos::from_millis(step * 40_000);
                        let obs: Vec<Observation> = (0..64)
                            .map(|v| Observation {
                                page: PageRef::base(SpaceId(1), Vpn(v)),
                                page_node: NodeId(if v % 2 == 0 { 1 } else { 0 }),
                                accessing_node: Some(NodeId(0)),
                                source: SourceKind::HwSample,
                                time: now,
                                weight: 1,
                            })
                            .collect();
                        engine.observe(&obs);
                        let plan = engine.tick(now, &usage);
                        for b in &plan.batches {
                            prop_assert!(b.pages.len() <= usize::try_from(c.batch_nr).unwrap());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = serde_json::from_str::<EngineConfig>(r#"{"freq_treshold": 2}"#).unwrap_err();
        assert!(e.to_string().contains("freq_treshold"));
        let ok: EngineConfig =
            serde_json::from_str(r#"{"mode": "precise", "sources": ["hw_sample"]}"#).unwrap();
        assert_eq!(ok.mode, HotnessMode::Precise);
    }
}
