//! One self-contained HTML page: the results table, the plots as inline SVG, the parameters,
//! the tierd version and the seed.
//!
//! Self-contained means the page loads nothing: the CSS is inline, the plots are `<svg>`
//! elements in the page (their `xmlns` attribute is dropped, the HTML parser puts `<svg>` in
//! the SVG namespace by itself, so the page holds no URL at all), there is no script. Every
//! text that comes from the caller goes through [`escape`].

use std::fmt::Write as _;

use crate::plot::{self, PlotError};
use crate::Figure;

/// A table: the same cells as a text table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// The `id` of the `<table>` element (tests and links find it by that).
    pub id: String,
    /// Shown above the table.
    pub caption: String,
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells; a cell that starts like a number is right-aligned.
    pub rows: Vec<Vec<String>>,
}

/// Everything on the page.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The page's title and heading.
    pub title: String,
    /// A line under the heading (what the scenario reproduces).
    pub description: String,
    /// The tierd version that produced the results.
    pub version: String,
    /// The seed of the run.
    pub seed: u64,
    /// Key parameters as `(name, value)`, shown as a list.
    pub params: Vec<(String, String)>,
    /// The tables, in order.
    pub tables: Vec<Table>,
    /// Lines shown preformatted under the tables (counters, warnings).
    pub notes: Vec<String>,
    /// The plots, each its own inline SVG (`id="plot-<n>"`).
    pub figures: Vec<Figure>,
    /// The full input (e.g. the scenario's TOML) as `(caption, text)`, shown collapsed.
    pub source: Option<(String, String)>,
}

/// `s` with `&`, `<`, `>`, `"` and `'` replaced by character references, safe in text and in
/// quoted attribute values.
#[must_use]
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// Whether a cell reads as a number (`12.5`, `-3%`, `+4 (5)`): right-aligned like the text
/// table's numeric columns.
fn numeric(cell: &str) -> bool {
    let t = cell.trim_start_matches(['+', '-']);
    t.starts_with(|c: char| c.is_ascii_digit()) || cell == "-"
}

const CSS: &str = "\
body{font-family:sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}\
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.6em}\
.meta{color:#555}\
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}\
.scroll{overflow-x:auto}\
th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}\
th{background:#f0f0f0;text-align:left}\
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}\
tbody tr:nth-child(even){background:#fafafa}\
dl.params{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}\
dl.params dt{font-weight:bold}dl.params dd{margin:0}\
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em}\
figure{margin:1em 0}svg{max-width:100%;height:auto}\
footer{margin-top:2em;color:#777;font-size:.85em}";

/// A plot as an element of the page: plotters' SVG without the namespace URL, with an id.
fn inline_svg(fig: &Figure, n: usize) -> Result<String, PlotError> {
    let svg = plot::svg_string(std::slice::from_ref(fig))?;
    let svg = svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
    let label = escape(&fig.title);
    Ok(svg.replacen(
        "<svg ",
        &format!("<svg id=\"plot-{n}\" class=\"plot\" role=\"img\" aria-label=\"{label}\" "),
        1,
    ))
}

fn table_html(o: &mut String, t: &Table) {
    let _ = writeln!(o, "<h2>{}</h2>", escape(&t.caption));
    let _ = writeln!(o, "<div class=\"scroll\"><table id=\"{}\">", escape(&t.id));
    o.push_str("<thead><tr>");
    for h in &t.headers {
        let _ = write!(o, "<th>{}</th>", escape(h));
    }
    o.push_str("</tr></thead>\n<tbody>\n");
    for r in &t.rows {
        o.push_str("<tr>");
        for c in r {
            let class = if numeric(c) { " class=\"num\"" } else { "" };
            let _ = write!(o, "<td{class}>{}</td>", escape(c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody></table></div>\n");
}

/// The page.
///
/// # Errors
/// [`PlotError`] when a figure cannot be drawn.
pub fn report(r: &Report) -> Result<String, PlotError> {
    let mut o = String::new();
    let title = escape(&r.title);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>{title}</h1>\n"
    );
    if !r.description.is_empty() {
        let _ = writeln!(o, "<p class=\"description\">{}</p>", escape(&r.description));
    }
    let _ = writeln!(
        o,
        "<p class=\"meta\">tierd <span id=\"version\">{}</span>, seed <span id=\"seed\">{}</span></p>",
        escape(&r.version),
        r.seed
    );
    for t in &r.tables {
        table_html(&mut o, t);
    }
    if !r.notes.is_empty() {
        let lines: Vec<String> = r.notes.iter().map(|l| escape(l)).collect();
        let _ = writeln!(o, "<pre id=\"notes\">{}</pre>", lines.join("\n"));
    }
    if !r.figures.is_empty() {
        o.push_str("<h2>Over time</h2>\n");
        for (i, f) in r.figures.iter().enumerate() {
            let _ = writeln!(
                o,
                "<figure>{}<figcaption hidden>{}</figcaption></figure>",
                inline_svg(f, i)?,
                escape(&f.title)
            );
        }
    }
    if !r.params.is_empty() {
        o.push_str("<h2>Parameters</h2>\n<dl class=\"params\" id=\"params\">\n");
        for (k, v) in &r.params {
            let _ = writeln!(o, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
        }
        o.push_str("</dl>\n");
    }
    if let Some((caption, text)) = &r.source {
        let _ = writeln!(
            o,
            "<details id=\"source\"><summary>{}</summary><pre>{}</pre></details>",
            escape(caption),
            escape(text)
        );
    }
    let _ = writeln!(
        o,
        "<footer>Written by tierd {} (seed {}). This page is self-contained: it loads nothing.</footer>\n</body>\n</html>",
        escape(&r.version),
        r.seed
    );
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Legend, Series};

    fn sample() -> Report {
        Report {
            title: "pointer-chase <&> \"q\"".into(),
            description: "a 'hot' set".into(),
            version: "0.1.0".into(),
            seed: 42,
            params: vec![("scale".into(), "0.05".into()), ("<k>".into(), "v&".into())],
            tables: vec![Table {
                id: "results".into(),
                caption: "Results".into(),
                headers: vec!["id".into(), "lat ns".into()],
                rows: vec![
                    vec!["B0".into(), "310 (300)".into()],
                    vec!["<script>".into(), "-".into()],
                ],
            }],
            notes: vec!["B0 numa_pte_updates=5 <x>".into()],
            figures: vec![
                Figure {
                    title: "Hot set on the fast tier".into(),
                    x_label: "s".into(),
                    y_label: "%".into(),
                    y_range: Some((0.0, 100.0)),
                    legend: Legend::LowerRight,
                    series: vec![
                        Series {
                            label: "B0".into(),
                            points: vec![(0.0, 0.0), (1.0, 50.0)],
                        },
                        Series {
                            label: "T1".into(),
                            points: vec![(0.0, 0.0), (1.0, 90.0)],
                        },
                    ],
                },
                Figure {
                    title: "Latency".into(),
                    x_label: "s".into(),
                    y_label: "ns".into(),
                    y_range: None,
                    legend: Legend::UpperRight,
                    series: vec![Series {
                        label: "B0".into(),
                        points: vec![(0.0, 300.0), (1.0, 200.0)],
                    }],
                },
            ],
            source: Some(("scenario.toml".into(), "name = \"<x>\"\n".into())),
        }
    }

    #[test]
    fn escape_covers_text_and_attributes() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain µs"), "plain µs");
    }

    #[test]
    fn the_page_has_the_table_the_plots_the_parameters_version_and_seed() {
        let page = report(&sample()).expect("page");
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<table id=\"results\">"));
        assert_eq!(page.matches("<tr>").count(), 3, "header + 2 rows");
        assert!(page.contains("<td class=\"num\">310 (300)</td>"));
        assert!(page.contains("<td>B0</td>"));
        assert!(page.contains("<svg id=\"plot-0\""));
        assert!(page.contains("<svg id=\"plot-1\""));
        assert_eq!(page.matches("<svg ").count(), 2);
        assert!(page.contains("<span id=\"version\">0.1.0</span>"));
        assert!(page.contains("<span id=\"seed\">42</span>"));
        assert!(page.contains("<dt>scale</dt><dd>0.05</dd>"));
        assert!(page.contains("name = &quot;&lt;x&gt;&quot;"));
    }

    #[test]
    fn caller_text_is_escaped_everywhere() {
        let page = report(&sample()).expect("page");
        assert!(!page.contains("<script>"), "a cell's markup got through");
        assert!(page.contains("<td>&lt;script&gt;</td>"));
        assert!(page.contains("<title>pointer-chase &lt;&amp;&gt; &quot;q&quot;</title>"));
        assert!(page.contains("<dt>&lt;k&gt;</dt><dd>v&amp;</dd>"));
        assert!(page.contains("B0 numa_pte_updates=5 &lt;x&gt;"));
        assert!(!page.contains("<x>") && !page.contains("<k>"));
    }

    #[test]
    fn the_page_loads_nothing_from_outside() {
        let page = report(&sample()).expect("page");
        for needle in [
            "http://", "https://", "src=", "href=", "<script", "<link", "url(", "@import",
        ] {
            assert!(!page.contains(needle), "found {needle:?}");
        }
    }
}
