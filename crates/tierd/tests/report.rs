//! `tierd compare --plot/--report` end to end, and the report rendered in headless Chromium.
//!
//! The Chromium test needs Debian's `chromium` package (scripts/report-deps.sh installs it in
//! CI). Without it the test prints SKIP, unless `TIERD_REQUIRE_CHROMIUM=1` (set by
//! scripts/test.sh after a successful install), where a missing browser is a failure.
// Integration tests are their own crate; the unit-test lint does not apply here.
#![allow(clippy::tests_outside_test_module)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The configurations of the shipped pointer-chase scenario (its table's rows, in order).
const IDS: [&str; 6] = ["B0", "N2", "D3", "H10", "H5", "T1"];

struct Outputs {
    _dir: tempfile::TempDir,
    stdout: String,
    svg: PathBuf,
    png: PathBuf,
    html: PathBuf,
}

/// One scaled-down comparison writing every output, shared by the tests (it takes seconds).
fn outputs() -> &'static Outputs {
    static OUT: OnceLock<Outputs> = OnceLock::new();
    OUT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let svg = dir.path().join("plot.svg");
        let png = dir.path().join("plot.png");
        let html = dir.path().join("report.html");
        let out = Command::new(env!("CARGO_BIN_EXE_tierd"))
            .args([
                "compare",
                "pointer-chase",
                "--scale",
                "0.05",
                "--no-progress",
            ])
            .arg("--plot")
            .arg(&svg)
            .arg("--plot")
            .arg(&png)
            .arg("--report")
            .arg(&html)
            .output()
            .expect("runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Outputs {
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            _dir: dir,
            svg,
            png,
            html,
        }
    })
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The `<tr>`s of the `<tbody>` of the table with this id.
fn body_rows<'a>(page: &'a str, id: &str) -> Vec<&'a str> {
    let start = page
        .find(&format!("<table id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no table {id}"));
    let t = &page[start..];
    let t = &t[..t.find("</table>").expect("table ends")];
    let body = &t[t.find("<tbody>").expect("tbody")..];
    body.split("<tr>").skip(1).collect()
}

#[test]
fn compare_writes_the_plots_and_the_report_beside_the_table() {
    let o = outputs();
    // The text table still goes to stdout.
    assert!(o.stdout.contains("hot@fast"), "{}", o.stdout);

    let svg = read(&o.svg);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for t in ["hot set on the fast tier", "mean access latency"] {
        assert!(svg.contains(t), "{t} missing");
    }
    // Every configuration has a line in both figures, labelled with its id and name.
    for id in IDS {
        assert_eq!(svg.matches(&format!("\n{id} ")).count(), 2, "{id}");
    }

    let png = std::fs::read(&o.png).expect("png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().expect("4")), 960);
    assert_eq!(u32::from_be_bytes(png[20..24].try_into().expect("4")), 840);

    let page = read(&o.html);
    let rows = body_rows(&page, "results");
    assert_eq!(rows.len(), IDS.len());
    for (row, id) in rows.iter().zip(IDS) {
        assert!(row.starts_with(&format!("<td>{id}</td>")), "{row}");
    }
    // The same cells as the text table: T1's row there, cell by cell.
    let t1 = o
        .stdout
        .lines()
        .find(|l| l.starts_with("T1 "))
        .expect("T1 row");
    let t1_row = rows[5];
    for cell in t1.split("  ").map(str::trim).filter(|c| !c.is_empty()) {
        assert!(
            t1_row.contains(&format!(">{cell}</td>")),
            "{cell:?} in {t1_row}"
        );
    }
    assert_eq!(page.matches("<svg id=\"plot-").count(), 2);
    assert!(page.contains(&format!(
        "<span id=\"version\">{}</span>",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(page.contains("<span id=\"seed\">1</span>"));
    assert!(page.contains("<dt>scale</dt><dd>0.05</dd>"));
    assert!(
        page.contains("name = &quot;pointer-chase&quot;"),
        "scenario TOML"
    );
    for needle in [
        "http://", "https://", "src=", "href=", "<script", "<link", "url(",
    ] {
        assert!(!page.contains(needle), "the page refers to {needle:?}");
    }
}

#[test]
fn an_unknown_plot_format_fails_before_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("plot.pdf");
    let out = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args([
            "compare",
            "pointer-chase",
            "--scale",
            "0.05",
            "--no-progress",
        ])
        .arg("--plot")
        .arg(&bad)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&bad.display().to_string()) && err.contains(".svg or .png"),
        "{err}"
    );
    // Checked before simulating: no table printed, no file written.
    assert!(out.stdout.is_empty());
    assert!(!bad.exists());
}

/// The Chromium binary, or `None` (after printing SKIP) where the test may skip.
fn chromium() -> Option<PathBuf> {
    let names = ["chromium", "chromium-browser", "google-chrome"];
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .flat_map(|d| names.iter().map(move |n| d.join(n)))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("TIERD_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "TIERD_REQUIRE_CHROMIUM=1 but no chromium on PATH (scripts/report-deps.sh installs it)"
        );
        eprintln!(
            "SKIP: no chromium on PATH: the HTML report is not rendered \
             (apt-get install chromium, or run scripts/report-deps.sh as root)"
        );
    }
    found
}

fn headless(browser: &Path, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    c.args(["--headless", "--no-sandbox", "--disable-gpu"])
        .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
fn the_report_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        return;
    };
    let o = outputs();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}", o.html.display());
    let out = headless(&browser, &dir.path().join("profile"))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The DOM after parsing: the table with a row per configuration, and both plots as
    // SVG elements with their lines.
    let dom = String::from_utf8_lossy(&out.stdout);
    let rows = body_rows(&dom, "results");
    assert_eq!(rows.len(), IDS.len(), "{dom}");
    for id in ["plot-0", "plot-1"] {
        let at = dom
            .find(&format!("<svg id=\"{id}\""))
            .unwrap_or_else(|| panic!("{id} not in the DOM"));
        let svg = &dom[at..at + dom[at..].find("</svg>").expect("svg ends")];
        assert!(svg.matches("<polyline").count() >= 2 * IDS.len(), "{id}");
    }

    let shot = dir.path().join("report.png");
    let out = headless(&browser, &dir.path().join("profile"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,2000")
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().expect("4")), 1280);
}
