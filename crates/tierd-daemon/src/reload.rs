//! What a reload (SIGHUP) may change in a running daemon, key by key.
//!
//! The daemon re-reads its file on SIGHUP, validates it as at start, and compares it with the
//! configuration in force, leaf key by leaf key ([`changed_keys`]). Every changed key must be
//! one that applies live ([`liveness`]); otherwise the whole reload is refused with the
//! first such key and its reason, and the old configuration stays. The engine's hotness
//! store, heat and move history are kept either way (`tierd_engine::Engine::reconfigure`).
//!
//! | Keys | Reload | Why |
//! | --- | --- | --- |
//! | `scope.*` | live | the scope is resolved again at every refresh |
//! | `sources.damon.{min_nr_accesses, min_relative_permille, max_pages_per_pass}` | live | read at every read-back |
//! | other `sources.*` | restart | the sources are started with them |
//! | `engine.mode`, `engine.threshold` | restart | the records' format, the heat kept |
//! | `engine.accessing_node` | restart | the CPU-to-node map is read at start only when needed |
//! | `engine.demotion.idle_after_ms` from 0 to on, with DAMON | restart | DAMON's idle-region scheme is set up at start |
//! | other `engine.*` | live | read by the engine on every pass |
//! | `daemon.{refresh_ms, numa_maps_max_age_ms, idle_after_ms, hugetlb}` | live | read on use |
//! | `daemon.{metrics_listen, allow_public_metrics, liveness_timeout_s, metrics_max_processes}` | restart | the endpoint is set up at start |
//! | `daemon.{placement_reverify_ms, verify_window_ms, state_dir}` | restart | built at start |
//! | `system.*` | restart | the roots are opened at start |

use std::collections::BTreeMap;

use crate::config::DaemonConfig;

/// Whether a key applies to a running daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// A reload applies it from the next pass or refresh.
    Live,
    /// Only a restart applies it; the reason.
    Restart(&'static str),
}

/// Keys (or key prefixes ending in `.`), first match wins, with their liveness.
const RULES: &[(&str, Liveness)] = &[
    (
        "scope.",
        Liveness::Live, // resolved again at every refresh
    ),
    ("sources.damon.min_nr_accesses", Liveness::Live),
    ("sources.damon.min_relative_permille", Liveness::Live),
    ("sources.damon.max_pages_per_pass", Liveness::Live),
    (
        "sources.",
        Liveness::Restart("the sources are started with their settings"),
    ),
    (
        "engine.mode",
        Liveness::Restart("the hotness records change format and would be dropped"),
    ),
    (
        "engine.threshold",
        Liveness::Restart(
            "the heat the relative threshold ranks pages by is only kept in relative mode",
        ),
    ),
    (
        "engine.accessing_node",
        Liveness::Restart("the CPU-to-node map is read at start, and only when needed"),
    ),
    ("engine.", Liveness::Live),
    ("daemon.refresh_ms", Liveness::Live),
    ("daemon.numa_maps_max_age_ms", Liveness::Live),
    ("daemon.idle_after_ms", Liveness::Live),
    ("daemon.hugetlb", Liveness::Live),
    (
        "daemon.metrics_listen",
        Liveness::Restart("the metrics endpoint is bound at start"),
    ),
    (
        "daemon.allow_public_metrics",
        Liveness::Restart("the metrics endpoint is bound at start"),
    ),
    (
        "daemon.liveness_timeout_s",
        Liveness::Restart("the metrics endpoint is set up at start"),
    ),
    (
        "daemon.metrics_max_processes",
        Liveness::Restart("the metrics endpoint is set up at start"),
    ),
    (
        "daemon.placement_reverify_ms",
        Liveness::Restart("the placement cache is built at start"),
    ),
    (
        "daemon.verify_window_ms",
        Liveness::Restart("the access check is opened at start"),
    ),
    (
        "daemon.state_dir",
        Liveness::Restart("the restart marker is kept there from the start"),
    ),
    (
        "system.",
        Liveness::Restart("the /proc, /sys and cgroup roots are opened at start"),
    ),
];

/// Whether `key` (dotted, as in the file: `engine.promote_rate_limit_mbps`) applies live.
/// A key no rule names needs a restart: the safe side for a key added later.
#[must_use]
pub fn liveness(key: &str) -> Liveness {
    RULES
        .iter()
        .find(|(k, _)| {
            if k.ends_with('.') {
                key.starts_with(k)
            } else {
                key == *k || key.strip_prefix(k).is_some_and(|r| r.starts_with('.'))
            }
        })
        .map_or(Liveness::Restart("not known to apply live"), |(_, l)| *l)
}

/// Every leaf key of `cfg` with its value as TOML (inline), in file order of tables. Arrays
/// are leaves. `engine.sources` is left out: the file does not set it (it follows
/// `[sources] enabled`).
#[must_use]
pub fn leaves(cfg: &DaemonConfig) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(toml::Value::Table(t)) = toml::Value::try_from(cfg) {
        walk("", &t, &mut out);
    }
    out.remove("engine.sources");
    out
}

fn walk(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, String>) {
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => walk(&key, inner, out),
            v => {
                out.insert(key, v.to_string());
            }
        }
    }
}

/// One changed key: its old and new values (`None`: unset, the default applies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Dotted key.
    pub key: String,
    /// The value in force before.
    pub old: Option<String>,
    /// The value read now.
    pub new: Option<String>,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".into());
        write!(f, "{} {} -> {}", self.key, v(&self.old), v(&self.new))
    }
}

/// The leaf keys whose values differ between `old` and `new`, sorted.
#[must_use]
pub fn changed_keys(old: &DaemonConfig, new: &DaemonConfig) -> Vec<Change> {
    let (a, b) = (leaves(old), leaves(new));
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| Change {
            key: k.clone(),
            old: a.get(k).cloned(),
            new: b.get(k).cloned(),
        })
        .collect()
}

/// A reload that cannot apply live.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{change} needs a restart: {reason}")]
pub struct NotLive {
    /// The first change that cannot apply live.
    pub change: Change,
    /// Why.
    pub reason: &'static str,
}

/// The changes from `old` to `new` when every one applies live.
///
/// # Errors
/// [`NotLive`] for the first change that needs a restart.
pub fn live_changes(old: &DaemonConfig, new: &DaemonConfig) -> Result<Vec<Change>, NotLive> {
    let changes = changed_keys(old, new);
    for c in &changes {
        // Turning idle demotion on needs DAMON's idle regions, whose scheme the source sets
        // up at start only when it was on (an age change, or turning it off, is live).
        if c.key == "engine.demotion.idle_after_ms"
            && old.engine.demotion.idle_after_ms == 0
            && new
                .sources
                .enabled
                .contains(&crate::config::SourceName::Damon)
        {
            return Err(NotLive {
                change: c.clone(),
                reason: "DAMON's idle-region scheme is set up at start, when idle demotion is on",
            });
        }
        if let Liveness::Restart(reason) = liveness(&c.key) {
            return Err(NotLive {
                change: c.clone(),
                reason,
            });
        }
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> DaemonConfig {
        DaemonConfig::parse(text, Path::new("t.toml")).expect("valid")
    }

    #[test]
    fn every_key_of_the_file_has_a_rule() {
        // Not the fallback: each key is decided on purpose.
        let mut keys: Vec<String> = leaves(&DaemonConfig::default()).into_keys().collect();
        // Unset by default (Option): not among the leaves.
        keys.extend(["engine.target_nid".into(), "engine.freq_window_ms".into()]);
        for key in &keys {
            assert!(
                RULES.iter().any(|(k, _)| if k.ends_with('.') {
                    key.starts_with(*k)
                } else {
                    key.as_str() == *k
                }),
                "{key} has no reload rule"
            );
        }
        assert_eq!(liveness("engine.target_nid"), Liveness::Live);
        assert_eq!(liveness("engine.freq_window_ms"), Liveness::Live);
        assert_eq!(
            liveness("engine.demotion.low_free_permille"),
            Liveness::Live
        );
        assert!(matches!(liveness("engine.mode"), Liveness::Restart(_)));
        assert!(matches!(liveness("sources.enabled"), Liveness::Restart(_)));
        assert!(matches!(
            liveness("daemon.metrics_listen"),
            Liveness::Restart(_)
        ));
        assert!(matches!(liveness("nothing.known"), Liveness::Restart(_)));
    }

    #[test]
    fn live_keys_pass_and_the_first_restart_key_is_named() {
        let old = parse("[scope]\npids = [1]\n");
        let new = parse(
            "[scope]\npids = [1, 2]\n[engine]\npromote_rate_limit_mbps = 128\ntarget_nid = 0\n",
        );
        let ch = live_changes(&old, &new).expect("live");
        let keys: Vec<&str> = ch.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "engine.promote_rate_limit_mbps",
                "engine.target_nid",
                "scope.pids"
            ]
        );
        assert_eq!(ch[1].to_string(), "engine.target_nid (unset) -> 0");
        assert_eq!(
            ch[0].to_string(),
            "engine.promote_rate_limit_mbps 65536 -> 128"
        );
        let new = parse(
            "[scope]\npids = [1]\n[engine]\npromote_rate_limit_mbps = 128\n\
             [daemon]\nmetrics_listen = \"127.0.0.1:9000\"\n",
        );
        let e = live_changes(&old, &new).expect_err("the endpoint is bound");
        assert_eq!(
            e.to_string(),
            "daemon.metrics_listen \"127.0.0.1:9464\" -> \"127.0.0.1:9000\" needs a restart: \
             the metrics endpoint is bound at start"
        );
        assert!(live_changes(&old, &old).expect("same").is_empty());
        // Idle demotion: turning it on with DAMON needs a restart (DAMON's idle scheme);
        // changing its age, or turning it off, is live.
        let on = |ms: u64| {
            parse(&format!(
                "[scope]\npids = [1]\n[engine.demotion]\nidle_after_ms = {ms}\n"
            ))
        };
        let e = live_changes(&old, &on(60_000)).expect_err("DAMON's idle scheme");
        assert!(e.to_string().contains("idle-region scheme"), "{e}");
        assert_eq!(
            live_changes(&on(60_000), &on(90_000)).expect("live").len(),
            1
        );
        assert_eq!(live_changes(&on(60_000), &old).expect("live").len(), 1);
    }
}
