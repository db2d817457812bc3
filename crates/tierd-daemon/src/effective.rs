//! `tierd config show`: the effective configuration as TOML, every key written out with its
//! default filled in, its unit and whether a reload (SIGHUP) applies it.
//!
//! The text parses back to the same [`DaemonConfig`] (a key left unset, such as
//! `engine.target_nid`, is shown as a comment with what applies instead), so that an operator
//! can start a file from it.

use crate::config::DaemonConfig;
use crate::reload::{liveness, Liveness};

/// Unit or allowed values of every key, for the comments (first match: a full key, then a
/// suffix). A key that matches nothing has no unit comment; a test keeps every key covered.
const UNITS: &[(&str, &str)] = &[
    ("scope.pids", "process ids"),
    ("scope.cgroups", "cgroup v2 paths under the cgroup mount"),
    (
        "sources.enabled",
        "damon | idle | perf, in order of preference",
    ),
    ("sources.damon.min_nr_regions", "regions"),
    ("sources.damon.max_nr_regions", "regions"),
    ("sources.damon.min_nr_accesses", "accesses per aggregation"),
    (
        "sources.damon.max_pages_per_pass",
        "4 KiB pages per read-back",
    ),
    ("sources.damon.intervals_goal_aggrs", "aggregations"),
    ("sources.perf.period", "eligible operations per sample"),
    ("engine.mode", "default | precise"),
    ("engine.threshold", "relative | fixed"),
    ("engine.target_nid", "NUMA node id"),
    ("engine.freq_threshold", "accesses within the window"),
    ("engine.batch_nr", "folios per migration batch"),
    (
        "engine.watermark_scale_factor",
        "1/10000 of a node's memory",
    ),
    ("engine.accessing_node", "threads | none"),
    ("engine.preferred_many", "always | follow-flag"),
    ("daemon.metrics_listen", "address:port"),
    ("daemon.metrics_max_processes", "processes"),
    ("daemon.state_dir", "absolute path"),
    ("daemon.hugetlb", "leave | move"),
    ("system.", "path"),
    ("topology.", "NUMA node ids"),
    ("_ms", "milliseconds"),
    ("_us", "microseconds"),
    ("_s", "seconds"),
    ("_mbps", "MB/s"),
    ("_permille", "per mille"),
    ("_bp", "basis points (1/100 %)"),
    ("_kib", "KiB"),
];

/// The unit (or the values allowed) of a dotted key; `true | false` for a boolean.
#[must_use]
pub fn unit_of(key: &str, value: &str) -> Option<&'static str> {
    if let Some((_, u)) = UNITS.iter().find(|(k, _)| {
        key == *k
            || (k.ends_with('.') && key.starts_with(k))
            || (k.starts_with('_') && key.ends_with(k))
    }) {
        return Some(u);
    }
    matches!(value, "true" | "false").then_some("true | false")
}

/// Keys the file may leave unset (`Option`), with what applies when unset.
fn unset_note(cfg: &DaemonConfig, key: &str) -> Option<String> {
    match key {
        "engine.target_nid" if cfg.engine.target_nid.is_none() => {
            Some("unset: node 0 if it is top tier, else the first top-tier node".into())
        }
        "engine.freq_window_ms" if cfg.engine.freq_window_ms.is_none() => Some(format!(
            "unset: the mode's default, {} ms in {} mode",
            cfg.engine.window_ms(),
            match cfg.engine.mode {
                tierd_engine::hotness::HotnessMode::Default => "default",
                tierd_engine::hotness::HotnessMode::Precise => "precise",
            }
        )),
        _ => None,
    }
}

fn comment(key: &str, value: &str) -> String {
    let unit = unit_of(key, value).unwrap_or("");
    let reload = match liveness(key) {
        Liveness::Live => "reload: live".to_string(),
        Liveness::Restart(_) => "reload: restart".to_string(),
    };
    if unit.is_empty() {
        format!("# {reload}")
    } else {
        format!("# {unit}; {reload}")
    }
}

/// The configuration as TOML with a comment on every key. `origin` says where it came from
/// (a path, or "built-in defaults") in the header.
#[must_use]
pub fn render(cfg: &DaemonConfig, origin: &str) -> String {
    let header = format!(
        "# tierd {}: effective configuration of {origin}\n# Every key, defaults filled in; \
         after each its unit and whether SIGHUP applies it (live) or it needs a restart.\n\n",
        env!("CARGO_PKG_VERSION")
    );
    // toml writes the tables in the structs' order; toml_edit attaches the comments to the
    // values, so that no value (a string with quotes, `#` or newlines) is ever cut.
    let mut doc: toml_edit::DocumentMut = match toml::to_string(cfg).map(|t| t.parse()) {
        Ok(Ok(doc)) => doc,
        // A DaemonConfig always serializes (no maps with non-string keys, no NaN).
        _ => return header,
    };
    if let Some(engine) = doc
        .get_mut("engine")
        .and_then(toml_edit::Item::as_table_mut)
    {
        // Follows [sources] enabled; the file may not set it.
        engine.remove("sources");
        let notes: String = ["target_nid", "freq_window_ms"]
            .iter()
            .filter_map(|k| {
                let key = format!("engine.{k}");
                let note = unset_note(cfg, &key)?;
                let unit = unit_of(&key, "").unwrap_or("");
                Some(format!("# {k} =   # {unit}; {note}; reload: live\n"))
            })
            .collect();
        if let Some(mut first) = engine.iter_mut().next().map(|(k, _)| k) {
            first.leaf_decor_mut().set_prefix(notes);
        }
    }
    annotate(doc.as_table_mut(), "");
    let mut text = doc.to_string();
    if !cfg.topology.is_set() {
        // An empty table says nothing: say what applies (the table's keys are all optional).
        text = text.replacen(
            "[topology]\n",
            "[topology]\n# fast = [], slow = [] (or tiers = [[...], ...])   # NUMA node ids; none named: \
             the kernel's memory tiers; reload: restart\n",
            1,
        );
    }
    header + &text
}

fn annotate(table: &mut toml_edit::Table, prefix: &str) {
    for (k, item) in table.iter_mut() {
        let key = if prefix.is_empty() {
            k.get().to_string()
        } else {
            format!("{prefix}.{}", k.get())
        };
        match item {
            toml_edit::Item::Table(t) => annotate(t, &key),
            toml_edit::Item::Value(v) => {
                let text = v.to_string();
                let c = comment(&key, text.trim());
                v.decor_mut().set_suffix(format!("   {c}"));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn every_key_has_a_unit_and_the_text_parses_back() {
        let cfg = DaemonConfig::parse("[scope]\npids = [7]\n", Path::new("t.toml")).expect("ok");
        let text = render(&cfg, "t.toml");
        for (key, value) in crate::reload::leaves(&cfg) {
            assert!(
                unit_of(&key, &value).is_some(),
                "{key} = {value} has no unit"
            );
        }
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(" = "))
        {
            assert!(line.contains("   # "), "no comment: {line}");
        }
        assert!(
            text.contains("promote_rate_limit_mbps = 65536   # MB/s; reload: live"),
            "{text}"
        );
        assert!(
            text.contains("metrics_listen = \"127.0.0.1:9464\"   # address:port; reload: restart"),
            "{text}"
        );
        assert!(
            text.contains("# target_nid =   # NUMA node id; unset:"),
            "{text}"
        );
        assert!(text.contains("3000 ms in default mode"), "{text}");
        assert!(
            !text.contains("sources = ["),
            "engine.sources is not the file's: {text}"
        );
        let back = DaemonConfig::parse(&text, Path::new("show.toml")).expect("parses back");
        assert_eq!(back, cfg);
    }

    #[test]
    fn set_options_are_written_as_keys() {
        let cfg = DaemonConfig::parse(
            "[scope]\nall = true\n[engine]\ntarget_nid = 0\nfreq_window_ms = 2000\n",
            Path::new("t.toml"),
        )
        .expect("ok");
        let text = render(&cfg, "t.toml");
        assert!(
            text.contains("\ntarget_nid = 0   # NUMA node id; reload: live"),
            "{text}"
        );
        assert!(
            text.contains("\nfreq_window_ms = 2000   # milliseconds; reload: live"),
            "{text}"
        );
        assert!(!text.contains("unset:"), "{text}");
        assert_eq!(
            DaemonConfig::parse(&text, Path::new("s.toml")).expect("back"),
            cfg
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// The line-wise commenting never changes a value: any strings (quotes, `#`, ` = `,
        /// brackets, newlines) and numbers come back as they went in.
        #[test]
        fn any_values_round_trip(
            cgroups in proptest::collection::vec("(?s).{0,24}", 0..4),
            pids in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..4),
            state_dir in "(?s).{0,24}",
            rate in proptest::prelude::any::<u64>(),
            window in proptest::option::of(proptest::prelude::any::<u32>()),
            target in proptest::option::of(proptest::prelude::any::<u16>()),
        ) {
            let mut cfg = DaemonConfig::default();
            cfg.scope.cgroups = cgroups;
            cfg.scope.pids = pids;
            cfg.daemon.state_dir = state_dir.into();
            // toml integers are i64.
            cfg.engine.promote_rate_limit_mbps = rate >> 1;
            cfg.engine.freq_window_ms = window;
            cfg.engine.target_nid = target.map(tierd_engine::types::NodeId);
            let text = render(&cfg, "proptest");
            let back: DaemonConfig = toml::from_str(&text)
                .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{e}\n{text}")))?;
            proptest::prop_assert_eq!(back, cfg);
        }
    }
}
