//! Drawing: [`render`] draws the state into a ratatui frame (pure: the same state gives the
//! same cells, which the tests read back from a `TestBackend`), and [`plain`] writes one view
//! as text for a stdout that is not a terminal.

use std::fmt::Write as _;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::Frame;

use crate::state::{Mode, SortKey, TopState};
use crate::view::{OwnerView, Rates, TopView, PAGE_BYTES};

/// Base pages as a short size: `512.0M`, `16.0G`.
#[must_use]
pub fn size(pages: u64) -> String {
    // Sizes are shown to one decimal: f64 is exact enough.
    #[allow(clippy::cast_precision_loss)]
    let bytes = pages.saturating_mul(PAGE_BYTES) as f64;
    human(bytes)
}

fn human(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0}{}", UNITS[u])
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

/// Base pages per second as bytes per second: `12.5M/s`.
#[must_use]
pub fn rate(pages_per_s: f64) -> String {
    // PAGE_BYTES is small: exact as f64.
    #[allow(clippy::cast_precision_loss)]
    let bytes = pages_per_s.max(0.0) * PAGE_BYTES as f64;
    format!("{}/s", human(bytes))
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    // Percentages to one decimal.
    #[allow(clippy::cast_precision_loss)]
    let p = part as f64 * 100.0 / whole as f64;
    format!("{p:.1}%")
}

fn bar(part: u64, whole: u64, width: usize) -> String {
    let filled = if whole == 0 {
        0
    } else {
        // part <= whole in practice; clamp anyway, the product fits u128.
        let f = u128::from(part.min(whole)) * width as u128 / u128::from(whole);
        usize::try_from(f).unwrap_or(width)
    };
    format!("{}{}", "#".repeat(filled), ".".repeat(width - filled))
}

/// Hot base pages of all processes on `node`.
fn hot_on_node(v: &TopView, node: u32) -> u64 {
    v.processes
        .iter()
        .map(|p| p.hot_pages.get(&node).copied().unwrap_or(0))
        .sum()
}

fn rates_line(v: &TopView, r: Option<&Rates>) -> String {
    let mut s = match r {
        Some(r) => format!(
            "promotion {} ({:.0} pages/s)   demotion {} ({:.0} pages/s)",
            rate(r.promote_pages_per_s),
            r.promote_pages_per_s,
            rate(r.demote_pages_per_s),
            r.demote_pages_per_s
        ),
        None => "promotion -   demotion -   (rates after the second refresh)".to_string(),
    };
    let _ = write!(
        s,
        "   promoted {}   demoted {}",
        size(v.promoted_pages),
        size(v.demoted_pages)
    );
    s
}

fn key_help(state: &TopState) -> Line<'static> {
    if state.editing {
        return Line::from(vec![
            Span::styled("filter: ", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!("{}_", state.filter)),
            Span::raw("   Enter keep  Esc clear"),
        ]);
    }
    let mut spans = vec![Span::raw(
        "q quit  s sort  r reverse  / filter  p processes  c cgroups  \u{2191}\u{2193} scroll",
    )];
    if !state.filter.is_empty() {
        spans.push(Span::styled(
            format!("   filter: {}", state.filter),
            Style::new().add_modifier(Modifier::BOLD),
        ));
    }
    if state.finished {
        spans.push(Span::styled(
            "   simulation finished",
            Style::new().fg(Color::Yellow),
        ));
    }
    if let Some(e) = &state.error {
        spans.push(Span::styled(
            format!("   error: {e}"),
            Style::new().fg(Color::Red),
        ));
    }
    Line::from(spans)
}

/// Draws the whole UI.
pub fn render(frame: &mut Frame<'_>, state: &TopState) {
    let area = frame.area();
    let Some(v) = &state.view else {
        let msg = state.error.as_deref().map_or_else(
            || "tierd top: waiting for the first view...".to_string(),
            |e| format!("tierd top: {e}"),
        );
        frame.render_widget(Paragraph::new(vec![Line::from(msg), key_help(state)]), area);
        return;
    };
    let counters: Vec<(&String, &u64)> = v.counters.iter().filter(|(_, c)| **c > 0).collect();
    let counter_rows = counters.len().div_ceil(2).min(8);
    let node_h = u16::try_from(v.nodes.len() + 3).unwrap_or(u16::MAX);
    let counters_h = u16::try_from(counter_rows + 3).unwrap_or(u16::MAX);
    let [head, nodes, rates_a, owners, counters_a, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(node_h),
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(counters_h),
        Constraint::Length(1),
    ])
    .areas(area);

    let bold = Style::new().add_modifier(Modifier::BOLD);
    frame.render_widget(
        Paragraph::new(vec![
            Line::from(vec![
                Span::styled("tierd top", bold.fg(Color::Cyan)),
                Span::raw(format!("  {}   t = {:.1} s", v.source, v.time_s)),
            ]),
            Line::from(v.notes.join("  |  ")),
        ]),
        head,
    );

    render_nodes(frame, nodes, v);
    frame.render_widget(Paragraph::new(rates_line(v, state.rates.as_ref())), rates_a);
    render_owners(frame, owners, state, v);
    render_counters(frame, counters_a, &counters, state.rates.as_ref());
    frame.render_widget(Paragraph::new(key_help(state)), foot);
}

fn render_nodes(frame: &mut Frame<'_>, area: Rect, v: &TopView) {
    let header = Row::new([
        "NODE", "TIER", "   TOTAL", "    USED", "    FREE", " USED%", "     HOT", "",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let rows = v.nodes.iter().map(|n| {
        let used = n.used_pages();
        let color = if n.tier == 0 {
            Color::Green
        } else {
            Color::Yellow
        };
        Row::new(vec![
            format!("{:>4}", n.id),
            format!("{:>4}", n.tier),
            format!("{:>8}", size(n.total_pages)),
            format!("{:>8}", size(used)),
            format!("{:>8}", size(n.free_pages)),
            format!("{:>6}", pct(used, n.total_pages)),
            format!("{:>8}", size(hot_on_node(v, n.id))),
            bar(used, n.total_pages, 40),
        ])
        .style(Style::new().fg(color))
    });
    let widths = [
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(40),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::new().borders(Borders::ALL).title(" nodes ")),
        area,
    );
}

/// The main table's column titles and each row's cells.
fn owner_table(
    state: &TopState,
    v: &TopView,
    rows: &[OwnerView],
) -> (Vec<String>, Vec<Vec<String>>) {
    let mut titles: Vec<String> = match state.mode {
        Mode::Processes => vec!["PID".into(), "NAME".into(), "CGROUP".into()],
        Mode::Cgroups => vec!["CGROUP".into(), "PROCS".into()],
    };
    titles.extend(["TOTAL".into(), "HOT".into()]);
    for n in &v.nodes {
        titles.push(format!("N{}", n.id));
        titles.push(format!("N{} HOT", n.id));
    }
    let cells = rows
        .iter()
        .map(|r| {
            let mut c: Vec<String> = match state.mode {
                Mode::Processes => vec![
                    r.pid.map_or_else(|| "-".into(), |p| p.to_string()),
                    r.name.clone(),
                    r.cgroup.clone(),
                ],
                Mode::Cgroups => vec![r.name.clone(), r.members.to_string()],
            };
            c.push(size(r.total()));
            c.push(size(r.hot()));
            for n in &v.nodes {
                c.push(size(r.pages.get(&n.id).copied().unwrap_or(0)));
                c.push(size(r.hot_pages.get(&n.id).copied().unwrap_or(0)));
            }
            c
        })
        .collect();
    (titles, cells)
}

/// The column the sort key sorts by, to highlight it.
fn sorted_column(state: &TopState) -> Option<&'static str> {
    match state.sort {
        SortKey::Total => Some("TOTAL"),
        SortKey::Hot => Some("HOT"),
        SortKey::Name => Some(match state.mode {
            Mode::Processes => "NAME",
            Mode::Cgroups => "CGROUP",
        }),
        SortKey::Fast | SortKey::HotSlow => None,
    }
}

fn render_owners(frame: &mut Frame<'_>, area: Rect, state: &TopState, v: &TopView) {
    let rows = state.rows();
    let (titles, cells) = owner_table(state, v, &rows);
    let highlight = sorted_column(state);
    let fixed = match state.mode {
        Mode::Processes => 3,
        Mode::Cgroups => 2,
    };
    let header = Row::new(titles.iter().enumerate().map(|(i, t)| {
        let s = Style::new().add_modifier(Modifier::BOLD);
        let s = if Some(t.as_str()) == highlight {
            s.add_modifier(Modifier::REVERSED)
        } else {
            s
        };
        let t = if i >= fixed {
            format!("{t:>8}")
        } else {
            t.clone()
        };
        Span::styled(t, s)
    }));
    let label_w = |i: usize, min: u16| {
        let w = cells
            .iter()
            .map(|c| c.get(i).map_or(0, String::len))
            .chain(std::iter::once(titles.get(i).map_or(0, String::len)))
            .max()
            .unwrap_or(0);
        Constraint::Length(u16::try_from(w).unwrap_or(u16::MAX).clamp(min, 24))
    };
    let widths: Vec<Constraint> = (0..titles.len())
        .map(|i| {
            if i < fixed {
                label_w(i, 5)
            } else {
                Constraint::Length(8)
            }
        })
        .collect();
    let shown = cells.len();
    let body = cells.into_iter().skip(state.scroll).map(|c| {
        Row::new(
            c.into_iter()
                .enumerate()
                .map(|(i, s)| if i >= fixed { format!("{s:>8}") } else { s }),
        )
    });
    let what = match state.mode {
        Mode::Processes => "processes",
        Mode::Cgroups => "cgroups",
    };
    let title = format!(
        " {what} ({shown}) sorted by {}{} ",
        state.sort.label(),
        if state.reverse { ", reversed" } else { "" }
    );
    frame.render_widget(
        Table::new(body, widths)
            .header(header)
            .block(Block::new().borders(Borders::ALL).title(title)),
        area,
    );
}

fn render_counters(
    frame: &mut Frame<'_>,
    area: Rect,
    counters: &[(&String, &u64)],
    rates: Option<&Rates>,
) {
    let per_s = |k: &str| {
        rates
            .and_then(|r| r.counters_per_s.get(k))
            .map_or_else(|| "-".to_string(), |x| format!("{x:.0}"))
    };
    let half = counters.len().div_ceil(2).min(8);
    let cell = |i: usize| -> [String; 3] {
        counters.get(i).map_or_else(
            || [String::new(), String::new(), String::new()],
            |(k, v)| [(*k).clone(), v.to_string(), per_s(k)],
        )
    };
    let rows = (0..half).map(|i| {
        let [a, b, c] = cell(i);
        let [d, e, f] = cell(i + half);
        Row::new(vec![
            a,
            format!("{b:>12}"),
            format!("{c:>10}"),
            d,
            format!("{e:>12}"),
            format!("{f:>10}"),
        ])
    });
    let widths = [
        Constraint::Length(30),
        Constraint::Length(12),
        Constraint::Length(10),
        Constraint::Length(30),
        Constraint::Length(12),
        Constraint::Length(10),
    ];
    let header = Row::new([
        "COUNTER",
        "       TOTAL",
        "       /s",
        "COUNTER",
        "       TOTAL",
        "       /s",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let more = counters.len().saturating_sub(2 * half);
    let title = if more > 0 {
        format!(" counters (non-zero; {more} more in plain output) ")
    } else {
        " counters (non-zero) ".to_string()
    };
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::new().borders(Borders::ALL).title(title)),
        area,
    );
}

/// One view as plain text (what `tierd top` prints when stdout is not a terminal).
#[must_use]
pub fn plain(v: &TopView, r: Option<&Rates>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "tierd top: {}, t = {:.1} s", v.source, v.time_s);
    for n in &v.notes {
        let _ = writeln!(o, "  {n}");
    }
    let _ = writeln!(
        o,
        "\n{:>4} {:>4} {:>8} {:>8} {:>8} {:>6} {:>8}",
        "NODE", "TIER", "TOTAL", "USED", "FREE", "USED%", "HOT"
    );
    for n in &v.nodes {
        let _ = writeln!(
            o,
            "{:>4} {:>4} {:>8} {:>8} {:>8} {:>6} {:>8}",
            n.id,
            n.tier,
            size(n.total_pages),
            size(n.used_pages()),
            size(n.free_pages),
            pct(n.used_pages(), n.total_pages),
            size(hot_on_node(v, n.id))
        );
    }
    let _ = writeln!(o, "\n{}", rates_line(v, r));
    for mode in [Mode::Processes, Mode::Cgroups] {
        let state = TopState {
            view: Some(v.clone()),
            mode,
            ..TopState::default()
        };
        let rows = state.rows();
        let (titles, cells) = owner_table(&state, v, &rows);
        let fixed = match mode {
            Mode::Processes => 3,
            Mode::Cgroups => 2,
        };
        let widths: Vec<usize> = (0..titles.len())
            .map(|i| {
                cells
                    .iter()
                    .map(|c| c[i].len())
                    .chain(std::iter::once(titles[i].len()))
                    .max()
                    .unwrap_or(0)
                    .max(if i < fixed { 0 } else { 8 })
            })
            .collect();
        let line = |c: &[String]| {
            c.iter()
                .enumerate()
                .map(|(i, s)| {
                    if i < fixed {
                        format!("{s:<w$}", w = widths[i])
                    } else {
                        format!("{s:>w$}", w = widths[i])
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let _ = writeln!(
            o,
            "\n{}",
            match mode {
                Mode::Processes => "processes:",
                Mode::Cgroups => "cgroups:",
            }
        );
        let _ = writeln!(o, "{}", line(&titles));
        for c in &cells {
            let _ = writeln!(o, "{}", line(c));
        }
    }
    let _ = writeln!(o, "\ncounters (non-zero):");
    for (k, v) in v.counters.iter().filter(|(_, c)| **c > 0) {
        let per_s = r
            .and_then(|r| r.counters_per_s.get(k))
            .map_or_else(String::new, |x| format!("  {x:.0}/s"));
        let _ = writeln!(o, "  {k:<36} {v:>14}{per_s}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Key;
    use crate::view::NodeView;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn view(t: f64, promoted: u64) -> TopView {
        let p = |pid: u32, name: &str, cg: &str, fast: u64, slow: u64, hot: u64| OwnerView {
            pid: Some(pid),
            name: name.into(),
            cgroup: cg.into(),
            members: 1,
            pages: [(0, fast), (2, slow)].into_iter().collect(),
            hot_pages: [(0, hot)].into_iter().collect(),
        };
        TopView {
            source: "daemon 127.0.0.1:9464".into(),
            time_s: t,
            nodes: vec![
                NodeView {
                    id: 0,
                    tier: 0,
                    total_pages: 4 << 18, // 4 GiB
                    free_pages: 1 << 18,
                },
                NodeView {
                    id: 2,
                    tier: 1,
                    total_pages: 16 << 18,
                    free_pages: 8 << 18,
                },
            ],
            processes: vec![
                p(4242, "chase", "/bench", 1 << 18, 3 << 18, 1 << 17),
                p(77, "redis", "/db", 1 << 16, 0, 0),
            ],
            promoted_pages: promoted,
            counters: [("pgpromote_success".to_string(), promoted)]
                .into_iter()
                .collect(),
            notes: vec!["damon running: vaddr".into()],
            ..TopView::default()
        }
    }

    fn draw(state: &TopState) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(120, 30)).expect("test backend");
        t.draw(|f| render(f, state)).expect("draw");
        let buf = t.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect()
    }

    fn line_with<'a>(lines: &'a [String], needle: &str) -> &'a str {
        lines.iter().find(|l| l.contains(needle)).map_or_else(
            || panic!("no line with {needle:?}:\n{}", lines.join("\n")),
            |s| s.as_str(),
        )
    }

    #[test]
    fn sizes_and_rates_are_short() {
        assert_eq!(size(0), "0B");
        assert_eq!(size(1), "4.0K");
        assert_eq!(size(1 << 18), "1.0G");
        assert_eq!(size(3 << 17), "1.5G");
        assert_eq!(rate(256.0), "1.0M/s");
        assert_eq!(bar(1, 4, 8), "##......");
        assert_eq!(bar(0, 0, 4), "....");
    }

    #[test]
    fn draws_nodes_processes_rates_and_counters() {
        let mut s = TopState::default();
        s.update(view(10.0, 0));
        s.update(view(12.0, 512));
        let lines = draw(&s);
        let all = lines.join("\n");
        assert!(all.contains("daemon 127.0.0.1:9464"), "{all}");
        assert!(all.contains("t = 12.0 s"), "{all}");
        // Node 0: 4 GiB, 3 GiB used (75 %), 0.5 GiB hot (chase's).
        let n0 = line_with(&lines, " 75.0%");
        assert!(
            n0.contains("4.0G") && n0.contains("3.0G") && n0.contains("512.0M"),
            "{n0}"
        );
        assert!(
            n0.contains("##############################.........."),
            "{n0}"
        );
        // chase: 4 GiB in all, 1 GiB on node 0 of which 512 MiB hot, 3 GiB on node 2.
        let chase = line_with(&lines, "chase");
        assert!(
            chase.contains("4242") && chase.contains("/bench"),
            "{chase}"
        );
        assert!(
            chase.contains("4.0G") && chase.contains("1.0G") && chase.contains("3.0G"),
            "{chase}"
        );
        assert!(all.contains("N2 HOT"), "{all}");
        // 512 pages in 2 s = 1 MiB/s.
        assert!(all.contains("promotion 1.0M/s (256 pages/s)"), "{all}");
        let c = line_with(&lines, "pgpromote_success");
        assert!(c.contains("512") && c.contains("256"), "{c}");
        assert!(all.contains("damon running: vaddr"), "{all}");
        assert!(all.contains("processes (2) sorted by total"), "{all}");
    }

    #[test]
    fn a_key_press_reorders_and_a_filter_is_shown() {
        let mut s = TopState::default();
        s.update(view(1.0, 0));
        let row_of = |lines: &[String], name: &str| lines.iter().position(|l| l.contains(name));
        let lines = draw(&s);
        assert!(
            row_of(&lines, "chase") < row_of(&lines, "redis"),
            "chase is larger"
        );
        s.key(Key::Char('s')); // hot
        s.key(Key::Char('s')); // fast tier
        s.key(Key::Char('s')); // hot on slow tiers
        s.key(Key::Char('s')); // name
        let lines = draw(&s);
        assert!(lines.join("\n").contains("sorted by name"));
        assert!(row_of(&lines, "chase") < row_of(&lines, "redis"), "c < r");
        s.key(Key::Char('r'));
        let lines = draw(&s);
        assert!(
            row_of(&lines, "redis") < row_of(&lines, "chase"),
            "reversed"
        );
        s.key(Key::Char('/'));
        for c in "red".chars() {
            s.key(Key::Char(c));
        }
        let lines = draw(&s);
        let all = lines.join("\n");
        assert!(all.contains("filter: red_"), "{all}");
        assert!(row_of(&lines, "chase").is_none(), "{all}");
        assert!(row_of(&lines, "redis").is_some(), "{all}");
        s.key(Key::Esc);
        s.key(Key::Char('c'));
        let all = draw(&s).join("\n");
        assert!(all.contains("cgroups (2)"), "{all}");
        assert!(all.contains("PROCS"), "{all}");
    }

    #[test]
    fn before_the_first_view_it_waits_or_shows_the_error() {
        let mut s = TopState::default();
        assert!(draw(&s)[0].contains("waiting"));
        s.set_error("connection refused".into());
        assert!(draw(&s)[0].contains("connection refused"));
    }

    #[test]
    fn plain_has_nodes_processes_cgroups_and_counters() {
        let a = view(1.0, 0);
        let b = view(3.0, 1024);
        let r = crate::view::rates(&a, &b);
        let text = plain(&b, r.as_ref());
        assert!(
            text.starts_with("tierd top: daemon 127.0.0.1:9464, t = 3.0 s\n"),
            "{text}"
        );
        assert!(
            text.contains("   0    0     4.0G     3.0G     1.0G  75.0%   512.0M"),
            "{text}"
        );
        assert!(text.contains("promotion 2.0M/s (512 pages/s)"), "{text}");
        let procs = text.find("processes:").expect("processes");
        let cgroups = text.find("cgroups:").expect("cgroups");
        let chase = text.find("4242  chase").expect("chase row");
        assert!(procs < chase && chase < cgroups, "{text}");
        assert!(text.contains("/db     1"), "{text}");
        assert!(text.contains("pgpromote_success"), "{text}");
        assert!(text.contains("512/s"), "{text}");
        assert!(!text.contains('\u{1b}'), "no escape codes");
    }
}
