//! The engine's configuration: pghot's tunables plus tierd's demotion, ping-pong and fairness
//! settings, with the kernel's defaults and ranges.
//!
//! Defaults and ranges come from mm/pghot.c, include/linux/pghot.h and
//! Documentation/admin-guide/mm/pghot.rst (kernel.md section 1.6):
//!
//! | knob | default | range |
//! |---|---|---|
//! | `freq_threshold` | 2 | 1-3 default mode, 1-7 precise |
//! | `freq_window_ms` | 3000 default / 5000 precise | 1000 - 3968 / 16383 |
//! | `promote_rate_limit_mbps` | 65536 | >= 0 |
//! | `interval_ms` (`kmigrated_sleep_ms`) | 100 | 50-1000 |
//! | `batch_nr` (`kmigrated_batch_nr`) | 512 | 64-1024 |

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::hotness::HotnessMode;
use crate::sources::SourceMask;
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
    /// Most pages in one migration batch (`kmigrated_batch_nr`).
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
}

/// pghot's default-mode frequency window (`PGHOT_DEFAULT_FREQ_WINDOW`, 3 s).
pub const DEFAULT_MODE_WINDOW_MS: u32 = 3000;
/// pghot's precise-mode frequency window (5 s).
pub const PRECISE_MODE_WINDOW_MS: u32 = 5000;
/// Relative mode's cooling period: 2 s, four reads of tierd's DAMON source and twenty
/// promoter passes, so a page's heat reflects the last few seconds; long enough that a page
/// seen once per read keeps a non-zero heat between reads.
pub const DEFAULT_HEAT_COOLING_MS: u64 = 2000;
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
        check("heat_cooling_ms", self.heat_cooling_ms, 100, 3_600_000)?;
        check("batch_nr", u64::from(self.batch_nr), 64, 1024)?;
        check(
            "pingpong_window_ms",
            self.pingpong_window_ms,
            0,
            24 * 3600 * 1000,
        )?;
        check(
            "watermark_scale_factor",
            u64::from(self.watermark_scale_factor),
            1,
            3000,
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
    fn unknown_keys_are_refused() {
        let e = serde_json::from_str::<EngineConfig>(r#"{"freq_treshold": 2}"#).unwrap_err();
        assert!(e.to_string().contains("freq_treshold"));
        let ok: EngineConfig =
            serde_json::from_str(r#"{"mode": "precise", "sources": ["hw_sample"]}"#).unwrap();
        assert_eq!(ok.mode, HotnessMode::Precise);
    }
}
