//! Figures to SVG or PNG with `plotters`, stacked one above the other in one image.
//!
//! Text (captions, axis labels, the legend) needs a font even in an SVG: plotters measures
//! every label to lay the chart out. Its default `ttf` feature finds system fonts through
//! `font-kit`, which links fontconfig/freetype at build time and finds nothing on a bare
//! machine; its `ab_glyph` feature is pure Rust but takes the font's bytes from the caller.
//! We embed DejaVu Sans (fonts-dejavu-core's file, Bitstream Vera licence plus public-domain
//! changes, see `fonts/DejaVuSans-LICENSE`): the plots then look the same on every machine,
//! need no font package and no fontconfig, and the tests run everywhere. An SVG names the
//! family `sans-serif`, so a browser draws it with its own sans-serif font.

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use thiserror::Error;

use crate::{Figure, Legend};

/// Width of every figure, pixels.
pub const WIDTH: u32 = 960;
/// Height of one figure, pixels (an image of n figures is n times as high).
pub const FIGURE_HEIGHT: u32 = 420;

/// DejaVu Sans, the font of every label (the module's docs say why it is embedded).
static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
/// The family the charts ask for; the embedded font is registered under it.
pub(crate) const FAMILY: &str = "sans-serif";

/// What went wrong drawing or writing a plot.
#[derive(Debug, Error)]
pub enum PlotError {
    /// The file's extension names no format this crate writes.
    #[error("{}: unknown plot format {ext:?} (the file name must end in .svg or .png)", path.display())]
    UnknownFormat {
        /// The file asked for.
        path: PathBuf,
        /// Its extension (empty when it has none).
        ext: String,
    },
    /// Nothing to draw.
    #[error("no figures to draw")]
    NoFigures,
    /// The embedded font did not load (a broken build).
    #[error("the embedded font does not parse")]
    Font,
    /// plotters failed while drawing.
    #[error("drawing the figure {figure:?}: {message}")]
    Draw {
        /// The figure's title.
        figure: String,
        /// plotters' error.
        message: String,
    },
    /// Encoding the bitmap as PNG failed.
    #[error("encoding {} as PNG: {source}", path.display())]
    Png {
        /// The file.
        path: PathBuf,
        /// The encoder's error.
        source: png::EncodingError,
    },
    /// Writing the file failed.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

/// The file formats [`write()`] produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics (`.svg`).
    Svg,
    /// A PNG bitmap (`.png`).
    Png,
}

impl Format {
    /// The format a file name asks for, by its extension (case-insensitive).
    ///
    /// # Errors
    /// [`PlotError::UnknownFormat`] for any other extension or none.
    pub fn of(path: &Path) -> Result<Format, PlotError> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "svg" => Ok(Format::Svg),
            "png" => Ok(Format::Png),
            _ => Err(PlotError::UnknownFormat {
                path: path.to_path_buf(),
                ext,
            }),
        }
    }
}

pub(crate) fn register_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

/// Colours of the lines, in series order (the Tableau 10 palette: distinct, colour-blind
/// friendlier than plotters' default).
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of the `i`-th series (the HTML report's legend uses the same).
#[must_use]
pub fn color(i: usize) -> (u8, u8, u8) {
    let c = COLORS[i % COLORS.len()];
    (c.0, c.1, c.2)
}

fn finite(fig: &Figure) -> impl Iterator<Item = (f64, f64)> + '_ {
    fig.series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite())
}

/// A range that contains `lo..hi` and is not empty (plotters divides by its length).
fn widen(lo: f64, hi: f64) -> Range<f64> {
    if !(lo.is_finite() && hi.is_finite()) || lo > hi {
        return 0.0..1.0;
    }
    if hi - lo < 1e-12 {
        let pad = if lo.abs() < 1e-12 {
            1.0
        } else {
            lo.abs() * 0.1
        };
        return (lo - pad)..(hi + pad);
    }
    lo..hi
}

/// The axes' ranges: x over the data; y from the figure or from 0 (or the data's minimum when
/// negative) to 5 % over the data's maximum.
fn ranges(fig: &Figure) -> (Range<f64>, Range<f64>) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0_f64, f64::MIN);
    for (x, y) in finite(fig) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    let y = match fig.y_range {
        Some((lo, hi)) => widen(lo, hi),
        None if y1 == f64::MIN => 0.0..1.0,
        None => widen(y0, y1 + 0.05 * (y1 - y0).abs()),
    };
    (widen(x0, x1), y)
}

/// Decimals of an axis' tick labels: none over a span of 10 or more (`50`, not `50.0`).
fn decimals(r: &Range<f64>) -> usize {
    let span = r.end - r.start;
    if span >= 10.0 {
        0
    } else if span >= 1.0 {
        1
    } else {
        3
    }
}

pub(crate) fn draw_one<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    fig: &Figure,
) -> Result<(), String> {
    let (xr, yr) = ranges(fig);
    let (xp, yp) = (decimals(&xr), decimals(&yr));
    let mut chart = ChartBuilder::on(area)
        .caption(&fig.title, (FAMILY, 24))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(xr, yr)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(fig.x_label.as_str())
        .y_desc(fig.y_label.as_str())
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 16))
        .x_label_formatter(&|v| format!("{v:.xp$}"))
        .y_label_formatter(&|v| format!("{v:.yp$}"))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in fig.series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    if !fig.series.is_empty() {
        let pos = match fig.legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::LowerLeft => SeriesLabelPosition::LowerLeft,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        };
        chart
            .configure_series_labels()
            .position(pos)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .label_font((FAMILY, 15))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Draws the figures one above the other on `root`.
fn draw_all<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    figures: &[Figure],
) -> Result<(), PlotError> {
    let fail = |figure: &str, message: String| PlotError::Draw {
        figure: figure.to_string(),
        message,
    };
    root.fill(&WHITE).map_err(|e| fail("", e.to_string()))?;
    let areas = root.split_evenly((figures.len(), 1));
    for (area, fig) in areas.iter().zip(figures) {
        draw_one(area, fig).map_err(|m| fail(&fig.title, m))?;
    }
    root.present().map_err(|e| fail("", e.to_string()))
}

pub(crate) fn height(n: usize) -> u32 {
    FIGURE_HEIGHT.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The figures as one SVG document (figures stacked vertically), e.g. to inline in HTML.
///
/// # Errors
/// [`PlotError::NoFigures`] for an empty slice, [`PlotError::Draw`] when plotters fails.
pub fn svg_string(figures: &[Figure]) -> Result<String, PlotError> {
    if figures.is_empty() {
        return Err(PlotError::NoFigures);
    }
    register_font()?;
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (WIDTH, height(figures.len()))).into_drawing_area();
        draw_all(&root, figures)?;
    }
    Ok(out)
}

/// The figures as a PNG image (figures stacked vertically).
///
/// # Errors
/// As [`svg_string`]; [`PlotError::Png`] when encoding fails (`path` only names it).
pub fn png_bytes(figures: &[Figure], path: &Path) -> Result<Vec<u8>, PlotError> {
    if figures.is_empty() {
        return Err(PlotError::NoFigures);
    }
    register_font()?;
    let (w, h) = (WIDTH, height(figures.len()));
    // Drawn into our own RGB buffer and encoded here, rather than plotters writing the file
    // through the `image` crate: one small dependency (png), and I/O errors carry the path.
    let mut rgb = vec![0_u8; (w as usize) * (h as usize) * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw_all(&root, figures)?;
    }
    let png_err = |source| PlotError::Png {
        path: path.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(png_err)?;
        writer.write_image_data(&rgb).map_err(png_err)?;
        writer.finish().map_err(png_err)?;
    }
    Ok(out)
}

/// Writes the figures to `path`, as SVG or PNG by its extension.
///
/// # Errors
/// [`PlotError::UnknownFormat`] for another extension (checked before drawing), else as
/// [`svg_string`] / [`png_bytes`], and [`PlotError::Io`] when the file cannot be written (it is
/// written atomically: [`crate::output::write_atomic`]).
pub fn write(path: &Path, figures: &[Figure]) -> Result<(), PlotError> {
    let bytes = match Format::of(path)? {
        Format::Svg => svg_string(figures)?.into_bytes(),
        Format::Png => png_bytes(figures, path)?,
    };
    crate::output::write_atomic(path, &bytes).map_err(|e| PlotError::Io {
        path: e.path,
        source: e.source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Series;

    fn fig(title: &str, labels: &[&str]) -> Figure {
        Figure {
            title: title.into(),
            x_label: "time s".into(),
            y_label: "hot set on fast %".into(),
            y_range: Some((0.0, 100.0)),
            legend: Legend::LowerRight,
            series: labels
                .iter()
                .enumerate()
                .map(|(i, l)| Series {
                    label: (*l).into(),
                    points: (0..20)
                        .map(|t| (f64::from(t), f64::from(t) * (i as f64 + 1.0)))
                        .collect(),
                })
                .collect(),
        }
    }

    /// The polylines drawn in the `i`-th series' colour, 2 px wide: its line and its legend
    /// sample (the grid is drawn in greys, 1 px).
    fn lines_of(svg: &str, i: usize) -> usize {
        let (r, g, b) = color(i);
        svg.matches(&format!(
            "stroke=\"#{r:02X}{g:02X}{b:02X}\" stroke-width=\"2\""
        ))
        .count()
    }

    #[test]
    fn one_line_and_one_legend_entry_per_series() {
        let svg =
            svg_string(&[fig("placement", &["B0 baseline", "N2 numa", "T1 tierd"])]).expect("svg");
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        // A line and a legend sample for each series, none in a fourth colour.
        for i in 0..3 {
            assert_eq!(lines_of(&svg, i), 2, "series {i}: {svg}");
        }
        assert_eq!(lines_of(&svg, 3), 0);
        for l in ["B0 baseline", "N2 numa", "T1 tierd", "placement", "time s"] {
            assert!(svg.contains(l), "{l} missing");
        }
    }

    #[test]
    fn stacked_figures_make_one_taller_image() {
        let svg = svg_string(&[fig("a", &["x"]), fig("b", &["y", "z"])]).expect("svg");
        assert!(svg.contains(&format!("height=\"{}\"", 2 * FIGURE_HEIGHT)));
        // Series colours restart in each figure: the first colour in both, the second once.
        assert_eq!((lines_of(&svg, 0), lines_of(&svg, 1)), (4, 2));
    }

    #[test]
    fn labels_are_escaped_so_the_svg_stays_well_formed() {
        let svg = svg_string(&[fig("a <b> & c", &["x<y & \"z\""])]).expect("svg");
        assert!(!svg.contains("<b>"), "{svg}");
        assert!(!svg.contains("x<y"), "{svg}");
        assert!(well_formed(&svg), "{svg}");
    }

    /// A small XML check: tags balance and no bare `&` or `<` stands in text.
    fn well_formed(s: &str) -> bool {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find(['<', '&']) {
            let (text, tail) = rest.split_at(i);
            let _ = text;
            if tail.starts_with('&') {
                let Some(end) = tail.find(';') else {
                    return false;
                };
                let ent = &tail[1..end];
                let named = ["lt", "gt", "amp", "quot", "apos"].contains(&ent);
                if !named && !ent.starts_with('#') {
                    return false;
                }
                rest = &tail[end + 1..];
                continue;
            }
            let Some(end) = tail.find('>') else {
                return false;
            };
            let tag = &tail[1..end];
            if tag.starts_with('?') || tag.starts_with('!') {
            } else if let Some(name) = tag.strip_prefix('/') {
                if stack.pop().as_deref() != Some(name.trim()) {
                    return false;
                }
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap_or_default();
                stack.push(name.to_string());
            }
            if tag.matches('"').count() % 2 != 0 || tag[1..].contains('<') {
                return false;
            }
            rest = &tail[end + 1..];
        }
        stack.is_empty()
    }

    #[test]
    fn the_checker_catches_broken_xml() {
        assert!(well_formed("<a x=\"1\"><b/>t &amp; u</a>"));
        assert!(!well_formed("<a><b></a>"));
        assert!(!well_formed("<a>x & y</a>"));
    }

    #[test]
    fn png_and_svg_by_extension_and_a_clear_error_otherwise() {
        let dir = tempfile::tempdir().expect("tempdir");
        let figs = [fig("a", &["x", "y"])];
        let png = dir.path().join("p.PNG");
        write(&png, &figs).expect("png");
        let bytes = std::fs::read(&png).expect("read");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height, big-endian, after the signature and the chunk header.
        assert_eq!(&bytes[16..20], &WIDTH.to_be_bytes());
        assert_eq!(&bytes[20..24], &FIGURE_HEIGHT.to_be_bytes());
        let svg = dir.path().join("p.svg");
        write(&svg, &figs).expect("svg");
        assert!(std::fs::read_to_string(&svg)
            .expect("read")
            .starts_with("<svg"));

        let bad = dir.path().join("p.jpg");
        let e = write(&bad, &figs).expect_err("jpg");
        assert!(matches!(&e, PlotError::UnknownFormat { ext, .. } if ext == "jpg"));
        assert!(e.to_string().contains(&bad.display().to_string()), "{e}");
        assert!(!bad.exists());
        assert!(matches!(
            write(&dir.path().join("noext"), &figs),
            Err(PlotError::UnknownFormat { .. })
        ));
        let missing = dir.path().join("no/such/dir/p.svg");
        let e = write(&missing, &figs).expect_err("no dir");
        assert!(matches!(e, PlotError::Io { .. }) && e.to_string().contains("no/such/dir"));
    }

    #[test]
    fn the_png_has_each_series_drawn_in_its_colour() {
        let f = fig("a", &["x", "y"]);
        let bytes = png_bytes(&[f], Path::new("mem.png")).expect("png");
        let mut reader = png::Decoder::new(bytes.as_slice())
            .read_info()
            .expect("decodes");
        let mut rgb = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut rgb).expect("frame");
        let rgb = &rgb[..info.buffer_size()];
        let count = |i: usize| {
            let (r, g, b) = color(i);
            rgb.chunks_exact(3).filter(|p| p == &[r, g, b]).count()
        };
        // A 2 px line across the chart is well over 500 pixels; a third colour is absent.
        assert!(
            count(0) > 500 && count(1) > 500,
            "{} {}",
            count(0),
            count(1)
        );
        assert_eq!(count(2), 0);
        // Text was rasterized: dark pixels in the caption's band (top 30 rows, away from the
        // y axis at the left; the lines stay low, the grid is light grey).
        let w = WIDTH as usize;
        let caption_dark = (0..30)
            .flat_map(|row| rgb[(row * w + 200) * 3..(row * w + 760) * 3].chunks_exact(3))
            .filter(|p| p.iter().all(|c| *c < 100))
            .count();
        assert!(caption_dark > 20, "{caption_dark}");
    }

    #[test]
    fn odd_data_draws_without_panicking() {
        let mut f = fig("odd", &[]);
        f.y_range = None;
        f.series = vec![
            Series {
                label: "empty".into(),
                points: vec![],
            },
            Series {
                label: "flat nan".into(),
                points: vec![
                    (1.0, 5.0),
                    (1.0, 5.0),
                    (f64::NAN, 1.0),
                    (2.0, f64::INFINITY),
                ],
            },
        ];
        let svg = svg_string(&[f.clone()]).expect("svg");
        assert!(svg.contains("flat nan"));
        f.series.clear();
        svg_string(&[f]).expect("no series");
        assert!(matches!(svg_string(&[]), Err(PlotError::NoFigures)));
    }

    #[test]
    fn ranges_cover_the_data_and_are_never_empty() {
        let mut f = fig("r", &["a"]);
        f.y_range = None;
        let (x, y) = ranges(&f);
        assert_eq!((x.start, x.end), (0.0, 19.0));
        assert_eq!(y.start, 0.0);
        assert!((y.end - 19.0 * 1.05).abs() < 1e-9);
        f.series[0].points = vec![(3.0, -2.0)];
        let (x, y) = ranges(&f);
        assert!(x.start < 3.0 && x.end > 3.0);
        assert!(y.start <= -2.0 && y.end > y.start);
    }
}
