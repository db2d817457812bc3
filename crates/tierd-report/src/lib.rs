//! Plots and a self-contained HTML report for tierd's comparisons (`tierd compare --plot`,
//! `--report`) and lab runs (`tierd lab --plot`).
//!
//! The crate knows nothing about the simulator or the lab: the callers turn their results into
//! the neutral [`Figure`] (lines over time) and [`html::Table`] (the same cells as their text
//! tables), so that this crate is the only one that depends on the plotting library.
//!
//! - [`plot`]: figures to an SVG or PNG file (by extension), or to an SVG string.
//! - [`heatmap`]: heat grids (a value per time window and address bucket) stacked with
//!   figures, to an SVG or PNG file (`tierd report TRACE --heatmap`).
//! - [`output`]: every output file written atomically (temporary file, fsync, rename).
//! - [`html`]: one HTML page with inline CSS and inline SVG plots, no scripts and no external
//!   resource, so that it opens in a browser without a network.

pub mod heatmap;
pub mod html;
pub mod output;
pub mod plot;

pub use output::{write_atomic, OutputError};

pub use plot::PlotError;

/// One line of a figure: a label for the legend and its points, in drawing order.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend's text (a configuration or run id and its name).
    pub label: String,
    /// `(x, y)` points; non-finite ones are skipped.
    pub points: Vec<(f64, f64)>,
}

/// Where a figure's legend goes: the corner its lines leave free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Legend {
    /// Top left.
    UpperLeft,
    /// Top right.
    #[default]
    UpperRight,
    /// Bottom left.
    LowerLeft,
    /// Bottom right.
    LowerRight,
}

/// One chart: lines sharing an x and a y axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// The caption above the chart.
    pub title: String,
    /// The x axis' description (with its unit).
    pub x_label: String,
    /// The y axis' description (with its unit).
    pub y_label: String,
    /// A fixed y range (`0..100` for percentages); `None`: from the data.
    pub y_range: Option<(f64, f64)>,
    /// The legend's corner.
    pub legend: Legend,
    /// The lines, one per configuration or run.
    pub series: Vec<Series>,
}
