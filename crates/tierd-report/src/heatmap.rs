//! Heat grids (`tierd report TRACE --heatmap`): a value per (time window, address bucket)
//! drawn as coloured cells, stacked with line figures in one SVG or PNG, as [`crate::plot`]
//! draws its figures (same font, size and atomic write).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plot::{draw_one, height, register_font, Format, PlotError, FAMILY, WIDTH};
use crate::Figure;

/// One heat grid: `rows` x `cols` cells over a time range.
#[derive(Clone, Debug, PartialEq)]
pub struct HeatGrid {
    /// The caption.
    pub title: String,
    /// The x axis' description.
    pub x_label: String,
    /// The y axis' description.
    pub y_label: String,
    /// Time of the first column's start and the last column's end.
    pub x_range: (f64, f64),
    /// Time windows.
    pub cols: usize,
    /// Buckets on the y axis, row 0 at the bottom.
    pub rows: usize,
    /// Values, row-major (`cells[row * cols + col]`); zero cells are left blank.
    pub cells: Vec<f64>,
}

/// One panel of the image.
#[derive(Clone, Debug, PartialEq)]
pub enum Panel {
    /// A heat grid.
    Heat(HeatGrid),
    /// Lines, as [`crate::plot`] draws them.
    Lines(Figure),
}

/// A colour for `v` in 0..=1: dark blue through teal and green to yellow (viridis' stops),
/// readable in grey and by most colour-blind readers.
// The casts take values clamped to 0..=4 (the stop index) and 0..=255 (a channel).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn colour(v: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 5] = [
        (68, 1, 84),
        (59, 82, 139),
        (33, 145, 140),
        (94, 201, 98),
        (253, 231, 37),
    ];
    let v = if v.is_finite() {
        v.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let x = v * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn draw_heat<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    g: &HeatGrid,
) -> Result<(), String> {
    let (x0, x1) = if g.x_range.1 > g.x_range.0 {
        g.x_range
    } else {
        (g.x_range.0, g.x_range.0 + 1.0)
    };
    let rows = g.rows.max(1);
    let cols = g.cols.max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(&g.title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..rows as f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(g.x_label.as_str())
        .y_desc(g.y_label.as_str())
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 16))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{:.0}%", 100.0 * v / rows as f64))
        .draw()
        .map_err(|e| e.to_string())?;
    // Log scale: a few very hot cells must not wash out the rest.
    let max = g.cells.iter().copied().fold(0.0_f64, f64::max);
    let scale = (1.0 + max).ln().max(f64::MIN_POSITIVE);
    let w = (x1 - x0) / cols as f64;
    let cells = g
        .cells
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0.0)
        .map(|(i, v)| {
            let (r, c) = (i / cols, i % cols);
            let x = x0 + c as f64 * w;
            Rectangle::new(
                [(x, r as f64), (x + w, r as f64 + 1.0)],
                colour((1.0 + v).ln() / scale).filled(),
            )
        });
    chart.draw_series(cells).map_err(|e| e.to_string())?;
    Ok(())
}

fn draw_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panels: &[Panel],
) -> Result<(), PlotError> {
    let fail = |figure: &str, message: String| PlotError::Draw {
        figure: figure.to_string(),
        message,
    };
    root.fill(&WHITE).map_err(|e| fail("", e.to_string()))?;
    let areas = root.split_evenly((panels.len(), 1));
    for (area, p) in areas.iter().zip(panels) {
        match p {
            Panel::Heat(g) => draw_heat(area, g).map_err(|m| fail(&g.title, m))?,
            Panel::Lines(f) => draw_one(area, f).map_err(|m| fail(&f.title, m))?,
        }
    }
    root.present().map_err(|e| fail("", e.to_string()))
}

/// The panels as one SVG document, stacked vertically.
///
/// # Errors
/// [`PlotError::NoFigures`] for no panels, [`PlotError::Draw`] when plotters fails.
pub fn svg_string(panels: &[Panel]) -> Result<String, PlotError> {
    if panels.is_empty() {
        return Err(PlotError::NoFigures);
    }
    register_font()?;
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (WIDTH, height(panels.len()))).into_drawing_area();
        draw_panels(&root, panels)?;
    }
    Ok(out)
}

fn png_bytes(panels: &[Panel], path: &Path) -> Result<Vec<u8>, PlotError> {
    if panels.is_empty() {
        return Err(PlotError::NoFigures);
    }
    register_font()?;
    let (w, h) = (WIDTH, height(panels.len()));
    let mut rgb = vec![0_u8; (w as usize) * (h as usize) * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw_panels(&root, panels)?;
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

/// Writes the panels to `path`, SVG or PNG by its extension, atomically.
///
/// # Errors
/// As [`crate::plot::write`].
pub fn write(path: &Path, panels: &[Panel]) -> Result<(), PlotError> {
    let bytes = match Format::of(path)? {
        Format::Svg => svg_string(panels)?.into_bytes(),
        Format::Png => png_bytes(panels, path)?,
    };
    crate::output::write_atomic(path, &bytes).map_err(|e| PlotError::Io {
        path: e.path,
        source: e.source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Legend, Series};

    fn panels() -> Vec<Panel> {
        let (rows, cols) = (8, 10);
        let cells = (0..rows * cols).map(|i| (i % 7) as f64).collect();
        vec![
            Panel::Heat(HeatGrid {
                title: "pid 100: access heat".into(),
                x_label: "time s".into(),
                y_label: "address".into(),
                x_range: (0.0, 10.0),
                cols,
                rows,
                cells,
            }),
            Panel::Lines(Figure {
                title: "working set".into(),
                x_label: "time s".into(),
                y_label: "pages".into(),
                y_range: None,
                legend: Legend::UpperRight,
                series: vec![Series {
                    label: "pid 100".into(),
                    points: vec![(0.0, 1.0), (5.0, 3.0)],
                }],
            }),
        ]
    }

    #[test]
    fn an_svg_has_a_cell_per_nonzero_value_and_both_panels() {
        let svg = svg_string(&panels()).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let nonzero = (0..80).filter(|i| i % 7 != 0).count();
        // Cells are filled rects in the colour scale's colours (the background is one more).
        assert!(
            svg.matches("<rect").count() > nonzero,
            "{}",
            svg.matches("<rect").count()
        );
        for l in ["pid 100: access heat", "working set", "time s"] {
            assert!(svg.contains(l), "{l}");
        }
        assert!(svg.contains(&format!("height=\"{}\"", 2 * crate::plot::FIGURE_HEIGHT)));
    }

    #[test]
    fn a_png_is_written_with_its_signature() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.png");
        write(&p, &panels()).unwrap();
        let b = std::fs::read(&p).unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
        assert!(write(&d.path().join("h.gif"), &panels())
            .unwrap_err()
            .to_string()
            .contains("unknown plot format"));
    }

    #[test]
    fn colours_run_from_dark_to_light() {
        let lum = |c: RGBColor| u32::from(c.0) + u32::from(c.1) + u32::from(c.2);
        assert!(lum(colour(0.0)) < lum(colour(0.5)));
        assert!(lum(colour(0.5)) < lum(colour(1.0)));
        assert_eq!(colour(f64::NAN), colour(0.0));
    }
}
