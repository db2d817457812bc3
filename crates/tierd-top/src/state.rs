//! The state of the terminal UI and its keys, as a pure state machine: a key in, the state
//! changed; the terminal loop only maps key events to [`Key`] and draws.

use std::cmp::Reverse;

use crate::view::{rates, OwnerView, Rates, TopView};

/// A key, as far as `tierd top` cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Enter.
    Enter,
    /// Escape.
    Esc,
    /// Backspace.
    Backspace,
    /// Arrow up.
    Up,
    /// Arrow down.
    Down,
    /// Ctrl-C.
    Interrupt,
}

/// Which table the main pane shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One row per process.
    Processes,
    /// One row per cgroup (its processes summed).
    Cgroups,
}

/// The column rows are sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// All pages, largest first.
    Total,
    /// Hot pages, most first.
    Hot,
    /// Pages on the fastest tier, most first.
    Fast,
    /// Hot pages on slower tiers (what promotion should still move), most first.
    HotSlow,
    /// Name, A to Z.
    Name,
}

impl SortKey {
    /// The order `s` cycles through.
    pub const ALL: [SortKey; 5] = [
        SortKey::Total,
        SortKey::Hot,
        SortKey::Fast,
        SortKey::HotSlow,
        SortKey::Name,
    ];

    /// Its name in the header.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            SortKey::Total => "total",
            SortKey::Hot => "hot",
            SortKey::Fast => "fast tier",
            SortKey::HotSlow => "hot on slow tiers",
            SortKey::Name => "name",
        }
    }

    fn next(self) -> SortKey {
        let i = SortKey::ALL.iter().position(|k| *k == self).unwrap_or(0);
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }
}

/// Everything the UI draws from.
#[derive(Clone, Debug)]
pub struct TopState {
    /// The latest view (None until the first arrives).
    pub view: Option<TopView>,
    /// Rates from the view before it.
    pub rates: Option<Rates>,
    /// Processes or cgroups.
    pub mode: Mode,
    /// Sort column.
    pub sort: SortKey,
    /// Reverse the sort.
    pub reverse: bool,
    /// Rows whose name, cgroup or pid contains this (case-insensitive) are shown.
    pub filter: String,
    /// Whether keys go to the filter (after `/`, until Enter or Esc).
    pub editing: bool,
    /// First row shown (scrolled with the arrows).
    pub scroll: usize,
    /// The last error from the source (the last good view stays shown).
    pub error: Option<String>,
    /// The source has no more views (a simulation that ended).
    pub finished: bool,
    /// `q` or Ctrl-C was pressed.
    pub quit: bool,
}

impl Default for TopState {
    fn default() -> Self {
        TopState {
            view: None,
            rates: None,
            mode: Mode::Processes,
            sort: SortKey::Total,
            reverse: false,
            filter: String::new(),
            editing: false,
            scroll: 0,
            error: None,
            finished: false,
            quit: false,
        }
    }
}

impl TopState {
    /// A new view arrives: rates are taken against the previous one.
    pub fn update(&mut self, view: TopView) {
        self.rates = self.view.as_ref().and_then(|prev| rates(prev, &view));
        self.view = Some(view);
        self.error = None;
    }

    /// The source failed this time.
    pub fn set_error(&mut self, message: String) {
        self.error = Some(message);
    }

    /// One key.
    pub fn key(&mut self, key: Key) {
        if key == Key::Interrupt {
            self.quit = true;
            return;
        }
        if self.editing {
            match key {
                Key::Char(c) => self.filter.push(c),
                Key::Backspace => {
                    self.filter.pop();
                }
                Key::Enter => self.editing = false,
                Key::Esc => {
                    self.editing = false;
                    self.filter.clear();
                }
                Key::Up | Key::Down | Key::Interrupt => {}
            }
            self.scroll = 0;
            return;
        }
        match key {
            Key::Char('q') => self.quit = true,
            Key::Char('s') => self.sort = self.sort.next(),
            Key::Char('r') => self.reverse = !self.reverse,
            Key::Char('/') => {
                self.editing = true;
                self.filter.clear();
                self.scroll = 0;
            }
            Key::Char('p') => {
                self.mode = Mode::Processes;
                self.scroll = 0;
            }
            Key::Char('c') => {
                self.mode = Mode::Cgroups;
                self.scroll = 0;
            }
            Key::Esc => self.filter.clear(),
            Key::Down => self.scroll = self.scroll.saturating_add(1),
            Key::Up => self.scroll = self.scroll.saturating_sub(1),
            Key::Char(_) | Key::Enter | Key::Backspace | Key::Interrupt => {}
        }
    }

    /// The rows of the main table: processes or cgroups, filtered, sorted.
    #[must_use]
    pub fn rows(&self) -> Vec<OwnerView> {
        let Some(v) = &self.view else {
            return Vec::new();
        };
        let mut rows = match self.mode {
            Mode::Processes => v.processes.clone(),
            Mode::Cgroups => v.cgroups(),
        };
        let needle = self.filter.to_lowercase();
        if !needle.is_empty() {
            rows.retain(|r| {
                r.name.to_lowercase().contains(&needle)
                    || r.cgroup.to_lowercase().contains(&needle)
                    || r.pid.is_some_and(|p| p.to_string().contains(&needle))
            });
        }
        sort_rows(&mut rows, self.sort, &v.fast_nodes(), &v.slow_nodes());
        if self.reverse {
            rows.reverse();
        }
        rows
    }
}

/// Sorts `rows` by `key`, ties by name then pid so the order is stable between refreshes.
pub fn sort_rows(rows: &mut [OwnerView], key: SortKey, fast: &[u32], slow: &[u32]) {
    let tie = |r: &OwnerView| (r.name.clone(), r.pid);
    match key {
        SortKey::Total => rows.sort_by_key(|r| (Reverse(r.total()), tie(r))),
        SortKey::Hot => rows.sort_by_key(|r| (Reverse(r.hot()), tie(r))),
        SortKey::Fast => rows.sort_by_key(|r| (Reverse(r.on(fast)), tie(r))),
        SortKey::HotSlow => rows.sort_by_key(|r| (Reverse(r.hot_on(slow)), tie(r))),
        SortKey::Name => rows.sort_by_key(tie),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::NodeView;

    fn view() -> TopView {
        let p = |pid: u32, name: &str, cg: &str, fast: u64, slow: u64, hot_slow: u64| OwnerView {
            pid: Some(pid),
            name: name.into(),
            cgroup: cg.into(),
            members: 1,
            pages: [(0, fast), (1, slow)].into_iter().collect(),
            hot_pages: [(1, hot_slow)].into_iter().collect(),
        };
        TopView {
            time_s: 1.0,
            nodes: vec![
                NodeView {
                    id: 0,
                    tier: 0,
                    total_pages: 100,
                    free_pages: 10,
                },
                NodeView {
                    id: 1,
                    tier: 1,
                    total_pages: 100,
                    free_pages: 50,
                },
            ],
            processes: vec![
                p(10, "redis", "/db", 5, 30, 1),
                p(11, "chase", "/bench", 40, 1, 0),
                p(12, "memcached", "/db", 1, 10, 9),
            ],
            ..TopView::default()
        }
    }

    fn names(s: &TopState) -> Vec<String> {
        s.rows().into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn s_cycles_the_sort_column_and_r_reverses() {
        let mut s = TopState::default();
        s.update(view());
        assert_eq!(s.sort, SortKey::Total);
        assert_eq!(names(&s), ["chase", "redis", "memcached"]);
        s.key(Key::Char('s'));
        assert_eq!(s.sort, SortKey::Hot);
        assert_eq!(names(&s), ["memcached", "redis", "chase"]);
        s.key(Key::Char('s'));
        assert_eq!(s.sort, SortKey::Fast);
        assert_eq!(names(&s), ["chase", "redis", "memcached"]);
        s.key(Key::Char('s'));
        assert_eq!(s.sort, SortKey::HotSlow);
        assert_eq!(names(&s), ["memcached", "redis", "chase"]);
        s.key(Key::Char('s'));
        assert_eq!(names(&s), ["chase", "memcached", "redis"]);
        s.key(Key::Char('r'));
        assert_eq!(names(&s), ["redis", "memcached", "chase"]);
        s.key(Key::Char('s'));
        assert_eq!(s.sort, SortKey::Total, "back to the first column");
    }

    #[test]
    fn slash_edits_a_filter_that_matches_name_cgroup_or_pid() {
        let mut s = TopState::default();
        s.update(view());
        s.key(Key::Char('/'));
        assert!(s.editing);
        for c in "DB".chars() {
            s.key(Key::Char(c));
        }
        // While editing, letters are filter text, not commands.
        assert!(!s.quit);
        assert_eq!(names(&s), ["redis", "memcached"]);
        s.key(Key::Enter);
        assert!(!s.editing);
        assert_eq!(s.filter, "DB");
        s.key(Key::Char('/'));
        s.key(Key::Char('1'));
        s.key(Key::Char('2'));
        assert_eq!(names(&s), ["memcached"], "pid 12");
        s.key(Key::Backspace);
        assert_eq!(names(&s).len(), 3, "pid 1x");
        s.key(Key::Esc);
        assert!(!s.editing && s.filter.is_empty());
        s.key(Key::Char('q'));
        assert!(s.quit);
    }

    #[test]
    fn c_shows_cgroups_and_p_processes() {
        let mut s = TopState::default();
        s.update(view());
        s.key(Key::Char('c'));
        assert_eq!(s.mode, Mode::Cgroups);
        let rows = s.rows();
        assert_eq!(rows.len(), 2);
        // Sorted by total: /db (35 + 11) before /bench (41).
        assert_eq!(rows[0].name, "/db");
        assert_eq!(rows[0].members, 2);
        assert_eq!(rows[0].total(), 46);
        assert_eq!(rows[1].name, "/bench");
        s.key(Key::Char('p'));
        assert_eq!(s.rows().len(), 3);
    }

    #[test]
    fn a_second_view_brings_rates_and_an_error_keeps_the_view() {
        let mut s = TopState::default();
        assert!(s.rows().is_empty());
        s.update(view());
        assert!(s.rates.is_none());
        let mut v = view();
        v.time_s = 3.0;
        v.promoted_pages = 20;
        s.update(v);
        let r = s.rates.clone().expect("two views");
        assert!((r.promote_pages_per_s - 10.0).abs() < 1e-12);
        s.set_error("connection refused".into());
        assert_eq!(s.rows().len(), 3);
        assert!(s.error.is_some());
        s.key(Key::Interrupt);
        assert!(s.quit);
    }
}
