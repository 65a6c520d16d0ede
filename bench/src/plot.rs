//! `tir-bench plot`: a run's results (`results.json`) as three SVG charts.
//!
//! - `ratios.svg`: per workload, each peer's time over tir's on a log axis, as a bar from 1.0
//!   (right of the line at 1.0: tir is faster); workloads whose output was wrong are left out,
//!   as the table leaves out their ratios, and so is a peer that did not run.
//! - `roofline.svg`: per workload, the share of its roofline tir reaches (bytes at the measured
//!   copy bandwidth, or flops at the tensor-core peak); the launch-overhead chains, a few
//!   hundred flops each, have their own chart.
//! - `launch_overhead.svg`: microseconds per kernel against the number of dependent kernels
//!   chained, for tir and each peer, stream launches and CUDA graphs apart.
//!
//! Only plotters' SVG backend: text is written as SVG `<text>` and laid out with plotters'
//! estimate of its size, so no fonts are read and no GPU is needed. Each file is written whole
//! to a temporary file beside it and renamed over it.

use crate::results::{BoundKind, Mode, Run, WorkloadResult};
use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::ranged1d::{AsRangedCoord, DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const RATIOS: &str = "ratios.svg";
pub const ROOFLINE: &str = "roofline.svg";
pub const LAUNCH_OVERHEAD: &str = "launch_overhead.svg";

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{file}: cannot draw: {message}")]
    Draw { file: &'static str, message: String },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What became of one chart.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Wrote(PathBuf),
    /// The run has nothing for it (a filtered run); no file is written.
    Skipped {
        file: &'static str,
        why: &'static str,
    },
}

type DrawError = Box<dyn std::error::Error>;

/// A chart's SVG text, or `None` when the run has nothing to draw in it.
type Drawn = Result<Option<String>, DrawError>;

/// A horizontal bar chart: `X` across, one row per workload down.
type BarChart<'a, X> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Rows>>;

/// One chart: its file, how it is drawn, and why a run may have nothing for it.
struct Chart {
    file: &'static str,
    draw: fn(&Run) -> Drawn,
    nothing: &'static str,
}

const CHARTS: [Chart; 3] = [
    Chart {
        file: RATIOS,
        draw: ratio_chart,
        nothing: "no workload has a peer's time",
    },
    Chart {
        file: ROOFLINE,
        draw: roofline_chart,
        nothing: "no workload besides launch-overhead chains",
    },
    Chart {
        file: LAUNCH_OVERHEAD,
        draw: launch_chart,
        nothing: "no launch-overhead chains",
    },
];

/// Draws the three charts of `run` into `out` (created if missing).
pub fn draw_all(run: &Run, out: &Path) -> Result<Vec<Outcome>, PlotError> {
    std::fs::create_dir_all(out).map_err(|source| PlotError::Write {
        path: out.to_path_buf(),
        source,
    })?;
    let mut outcomes = Vec::new();
    for chart in &CHARTS {
        let file = chart.file;
        let drawn = (chart.draw)(run).map_err(|e| PlotError::Draw {
            file,
            message: e.to_string(),
        })?;
        match drawn {
            Some(svg) => {
                let path = out.join(file);
                write_atomic(&path, &svg)?;
                outcomes.push(Outcome::Wrote(path));
            }
            None => outcomes.push(Outcome::Skipped {
                file,
                why: chart.nothing,
            }),
        }
    }
    Ok(outcomes)
}

/// Writes `text` to a temporary file beside `path` and renames it over `path`, so that a reader
/// finds the old chart or the new one, never a part.
fn write_atomic(path: &Path, text: &str) -> Result<(), PlotError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let failed = |source| PlotError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&tmp, text).map_err(failed)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        failed(e)
    })
}

const WIDTH: u32 = 1100;
const HEADER: u32 = 84;
const FONT: &str = "sans-serif";
/// Average width of a character of 13 px sans-serif, for laying out labels (plotters' own
/// estimate is narrower than browsers' fonts).
const CHAR_PX: f64 = 7.5;

const TIR: RGBColor = RGBColor(31, 119, 180);
const MEMORY: RGBColor = RGBColor(31, 119, 180);
const COMPUTE: RGBColor = RGBColor(230, 126, 34);

/// Each peer's colour: the known ones fixed, so a peer keeps its colour across runs.
fn peer_color(peer: &str, index: usize) -> RGBColor {
    match peer {
        "eager" => RGBColor(230, 126, 34),
        "torch.compile" => RGBColor(44, 160, 44),
        "cuBLASLt" => RGBColor(148, 103, 189),
        _ => {
            let (r, g, b) = Palette99::pick(index + 7).rgb();
            RGBColor(r, g, b)
        }
    }
}

/// The peers of `workloads`: the known ones first, in a fixed order, then the others by name.
fn peer_order<'a>(workloads: &[&'a WorkloadResult]) -> Vec<&'a str> {
    const KNOWN: [&str; 3] = ["eager", "torch.compile", "cuBLASLt"];
    let mut peers: Vec<&str> = workloads
        .iter()
        .flat_map(|w| w.peers.keys().map(String::as_str))
        .collect();
    peers.sort_by_key(|p| (KNOWN.iter().position(|k| k == p).unwrap_or(KNOWN.len()), *p));
    peers.dedup();
    peers
}

/// Where the numbers come from: device, date and commit, and the other commits some workloads
/// ran at.
fn source_line(run: &Run) -> String {
    let mut line = format!("{}, {}, tir {}", run.device, run.date, run.commit);
    let mut others: Vec<&str> = Vec::new();
    for commit in run.workloads.iter().filter_map(|w| w.commit.as_deref()) {
        if commit != run.commit && !others.contains(&commit) {
            others.push(commit);
        }
    }
    if !others.is_empty() {
        line += &format!(
            " (some workloads at {}: see the notes of results.json)",
            others.join(", ")
        );
    }
    line
}

/// A legend entry's sample.
enum Swatch {
    Bar(RGBColor),
    Line { color: RGBColor, dashed: bool },
}

/// The title, the source line and a one-line legend, above the chart.
fn header<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    source: &str,
    legend: &[(String, Swatch)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    area.draw(&Text::new(
        title.to_string(),
        (15, 10),
        (FONT, 19).into_font().style(FontStyle::Bold),
    ))?;
    area.draw(&Text::new(
        source.to_string(),
        (15, 36),
        (FONT, 13).into_font().color(&RGBColor(90, 90, 90)),
    ))?;
    let (mut x, y) = (15, 64);
    for (label, swatch) in legend {
        match swatch {
            Swatch::Bar(color) => area.draw(&Rectangle::new(
                [(x, y - 6), (x + 14, y + 6)],
                color.filled(),
            ))?,
            Swatch::Line { color, dashed } => {
                let style = color.stroke_width(2);
                if *dashed {
                    for start in [x, x + 10, x + 20] {
                        area.draw(&PathElement::new([(start, y), (start + 6, y)], style))?;
                    }
                } else {
                    area.draw(&PathElement::new([(x, y), (x + 26, y)], style))?;
                }
            }
        }
        let sample = if matches!(swatch, Swatch::Bar(_)) {
            20
        } else {
            32
        };
        area.draw(&Text::new(
            label.clone(),
            (x + sample, y),
            (FONT, 13)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        x += sample + (label.chars().count() as f64 * CHAR_PX) as i32 + 24;
    }
    Ok(())
}

/// Room for the longest of `names` left of the chart.
fn label_area(names: &[String]) -> u32 {
    let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    (longest as f64 * CHAR_PX * 12.0 / 13.0) as u32 + 16
}

/// The vertical axis of a bar chart: one unit per row, ticked at each row's middle (where
/// `row_name` puts its name).
struct Rows(RangedCoordf64);

impl Rows {
    fn new(rows: usize) -> Rows {
        Rows((0.0..rows as f64).into())
    }
}

impl Ranged for Rows {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.0.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _: Hint) -> Vec<f64> {
        let rows = self.0.range().end as usize;
        (0..rows).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.0.range()
    }
}

/// The name of the row whose band holds `y` (the first row at the top, each row one unit).
fn row_name(names: &[String], y: f64) -> String {
    let from_bottom = y.floor().max(0.0) as usize;
    names
        .len()
        .checked_sub(from_bottom + 1)
        .and_then(|i| names.get(i))
        .cloned()
        .unwrap_or_default()
}

/// Ticks at 1, 2 and 5 times the powers of ten within `lo..hi`.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for step in [1.0, 2.0, 5.0] {
            let t = decade * step;
            if t >= lo && t <= hi {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

fn value_label(text: String, at: (f64, f64), right_of: bool) -> Text<'static, (f64, f64), String> {
    let h = if right_of { HPos::Left } else { HPos::Right };
    Text::new(
        text,
        at,
        (FONT, 11)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(h, VPos::Center)),
    )
}

/// A white canvas of `height` pixels that writes into `svg`, with the title, the source line
/// and the legend drawn; the area below them, for the chart.
fn canvas<'a>(
    svg: &'a mut String,
    height: u32,
    title: &str,
    run: &Run,
    legend: &[(String, Swatch)],
) -> Result<DrawingArea<SVGBackend<'a>, Shift>, DrawError> {
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(HEADER);
    header(&top, title, &source_line(run), legend)?;
    Ok(body)
}

/// The frame of a horizontal bar chart on `body`: one row per name, the first at the top, and
/// `x` across, its ticks written by `x_format`.
fn bar_frame<'a, X>(
    body: &DrawingArea<SVGBackend<'a>, Shift>,
    x: X,
    names: &[String],
    x_desc: &str,
    x_format: &dyn Fn(&f64) -> String,
) -> Result<BarChart<'a, X::CoordDescType>, DrawError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(body)
        .margin_right(30)
        .margin_bottom(10)
        .x_label_area_size(45)
        .y_label_area_size(label_area(names))
        .build_cartesian_2d(x, Rows::new(names.len()))?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .disable_y_mesh()
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .x_desc(x_desc)
        .x_label_formatter(x_format)
        .y_label_formatter(&|y| row_name(names, *y))
        .draw()?;
    Ok(chart)
}

/// Peer time over tir time per workload, bars from 1.0 on a log axis.
fn ratio_chart(run: &Run) -> Drawn {
    let rows: Vec<&WorkloadResult> = run
        .workloads
        .iter()
        .filter(|w| !w.wrong && !w.peers.is_empty())
        .collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let peers = peer_order(&rows);
    let (mut lo, mut hi) = (1.0f64, 1.0f64);
    for w in &rows {
        for ms in w.peers.values() {
            lo = lo.min(ms / w.tir_ms);
            hi = hi.max(ms / w.tir_ms);
        }
    }
    let (lo, hi) = (lo / 1.3, hi * 1.6);
    let n = rows.len();
    let most_bars = rows.iter().map(|w| w.peers.len()).max().unwrap_or(1);
    let height = HEADER + (n * (8 + 12 * most_bars)) as u32 + 60;
    let names: Vec<String> = rows.iter().map(|w| w.name.clone()).collect();
    let legend: Vec<(String, Swatch)> = peers
        .iter()
        .enumerate()
        .map(|(i, p)| (p.to_string(), Swatch::Bar(peer_color(p, i))))
        .collect();
    let mut svg = String::new();
    {
        let body = canvas(
            &mut svg,
            height,
            "tir against each peer: peer time / tir time (right of 1: tir is faster)",
            run,
            &legend,
        )?;
        let mut chart = bar_frame(
            &body,
            (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
            &names,
            "peer ms / tir ms (log scale)",
            &|x| format!("{x}x"),
        )?;
        chart.draw_series(LineSeries::new(
            [(1.0, 0.0), (1.0, n as f64)],
            BLACK.stroke_width(1),
        ))?;
        for (index, peer) in peers.iter().enumerate() {
            let color = peer_color(peer, index);
            let mut bars = Vec::new();
            let mut labels = Vec::new();
            for (i, w) in rows.iter().enumerate() {
                let Some(ms) = w.peers.get(*peer) else {
                    continue;
                };
                // The row's bars share 0.8 of its band, in the legend's order from the top.
                let slot = peers
                    .iter()
                    .filter(|p| w.peers.contains_key(**p))
                    .position(|p| p == peer)
                    .unwrap_or(0);
                let bar = 0.8 / w.peers.len() as f64;
                let top = (n - i) as f64 - 0.1 - slot as f64 * bar;
                let ratio = ms / w.tir_ms;
                bars.push(Rectangle::new(
                    [(1.0, top - bar), (ratio, top)],
                    color.filled(),
                ));
                let at = if ratio >= 1.0 {
                    ratio * 1.02
                } else {
                    ratio / 1.02
                };
                labels.push(value_label(
                    format!("{ratio:.2}x"),
                    (at, top - bar / 2.0),
                    ratio >= 1.0,
                ));
            }
            chart.draw_series(bars)?;
            chart.draw_series(labels)?;
        }
        body.present()?;
    }
    Ok(Some(svg))
}

/// The share of the roofline tir reaches per workload, bars from 0 to 100% and beyond.
fn roofline_chart(run: &Run) -> Drawn {
    let rows: Vec<&WorkloadResult> = run.workloads.iter().filter(|w| w.chain.is_none()).collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let n = rows.len();
    let most = rows
        .iter()
        .map(|w| 100.0 * w.roofline_share())
        .fold(100.0, f64::max);
    let height = HEADER + (n * 22) as u32 + 60;
    let names: Vec<String> = rows.iter().map(|w| w.name.clone()).collect();
    let legend = [
        (
            "memory-bound: share of the measured copy bandwidth".to_string(),
            Swatch::Bar(MEMORY),
        ),
        (
            "compute-bound: share of the fp16 tensor-core peak".to_string(),
            Swatch::Bar(COMPUTE),
        ),
    ];
    let mut svg = String::new();
    {
        let body = canvas(
            &mut svg,
            height,
            "tir's share of the roofline per workload",
            run,
            &legend,
        )?;
        let mut chart = bar_frame(&body, 0.0..most * 1.12, &names, "% of the roofline", &|x| {
            format!("{x}%")
        })?;
        let mut bars = Vec::new();
        let mut labels = Vec::new();
        for (i, w) in rows.iter().enumerate() {
            let share = 100.0 * w.roofline_share();
            let color = match w.bound {
                BoundKind::Memory => MEMORY,
                BoundKind::Compute => COMPUTE,
            };
            let band = (n - 1 - i) as f64;
            bars.push(Rectangle::new(
                [(0.0, band + 0.15), (share, band + 0.85)],
                color.filled(),
            ));
            labels.push(value_label(
                format!("{share:.0}%"),
                (share + most * 0.01, band + 0.5),
                true,
            ));
        }
        chart.draw_series(bars)?;
        chart.draw_series(labels)?;
        chart.draw_series(LineSeries::new(
            [(100.0, 0.0), (100.0, n as f64)],
            BLACK.stroke_width(1),
        ))?;
        body.present()?;
    }
    Ok(Some(svg))
}

/// Microseconds per kernel against the number of chained kernels, per runner and mode.
fn launch_chart(run: &Run) -> Drawn {
    let chains: Vec<&WorkloadResult> = run.workloads.iter().filter(|w| w.chain.is_some()).collect();
    if chains.is_empty() {
        return Ok(None);
    }
    let peers = peer_order(&chains);
    let runners: Vec<&str> = std::iter::once("tir").chain(peers).collect();
    // (runner, mode) -> (kernels, µs per kernel), in the order of the runners.
    let mut series: BTreeMap<(usize, Mode), Vec<(f64, f64)>> = BTreeMap::new();
    for w in &chains {
        let kernels = w.chain.unwrap_or(1) as f64;
        let times = std::iter::once(("tir", w.tir_ms))
            .chain(w.peers.iter().map(|(p, ms)| (p.as_str(), *ms)));
        for (runner, ms) in times {
            let index = runners.iter().position(|r| *r == runner).unwrap_or(0);
            series
                .entry((index, w.mode))
                .or_default()
                .push((kernels, 1e3 * ms / kernels));
        }
    }
    for points in series.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let mut counts: Vec<f64> = chains
        .iter()
        .filter_map(|w| w.chain)
        .map(|n| n as f64)
        .collect();
    counts.sort_by(f64::total_cmp);
    counts.dedup();
    let (first, last) = (counts[0], counts[counts.len() - 1]);
    let most = series.values().flatten().map(|p| p.1).fold(0.0, f64::max);
    let color = |runner: usize| {
        if runner == 0 {
            TIR
        } else {
            peer_color(runners[runner], runner - 1)
        }
    };
    let legend: Vec<(String, Swatch)> = series
        .keys()
        .map(|&(runner, mode)| {
            (
                format!("{}, {}", runners[runner], mode.describe()),
                Swatch::Line {
                    color: color(runner),
                    dashed: mode == Mode::Graph,
                },
            )
        })
        .collect();
    let mut svg = String::new();
    {
        let body = canvas(
            &mut svg,
            560,
            "Launch overhead: a chain of N dependent small kernels",
            run,
            &legend,
        )?;
        let mut chart = ChartBuilder::on(&body)
            .margin_right(30)
            .margin_bottom(10)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(
                ((first / 1.6)..(last * 1.6))
                    .log_scale()
                    .with_key_points(counts.clone()),
                0.0..most * 1.15,
            )?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .x_desc("N, kernels chained (log scale)")
            .y_desc("µs per kernel (time / N)")
            .x_label_formatter(&|x| format!("{x}"))
            .draw()?;
        for (&(runner, mode), points) in &series {
            let color = color(runner);
            let style = color.stroke_width(2);
            match mode {
                Mode::Stream => {
                    chart.draw_series(LineSeries::new(points.iter().copied(), style))?;
                }
                Mode::Graph => {
                    chart.draw_series(DashedLineSeries::new(
                        points.iter().copied(),
                        8,
                        5,
                        style,
                    ))?;
                }
            }
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        body.present()?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::FIXTURE;

    fn fixture() -> Run {
        Run::parse(FIXTURE, Path::new("fixture.json")).unwrap()
    }

    /// Every `<text>` element's content, in order.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                t.split_once('>')
                    .and_then(|(_, rest)| rest.split_once("</text>"))
            })
            .map(|(text, _)| text.trim())
            .collect()
    }

    /// A bar's label, such as `1.25x` (axis ticks have one decimal at most).
    fn is_ratio_label(text: &str) -> bool {
        text.strip_suffix('x')
            .and_then(|t| t.split_once('.'))
            .is_some_and(|(_, decimals)| decimals.len() == 2)
    }

    #[test]
    fn draws_three_svgs_that_name_the_workloads() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("plots");
        let outcomes = draw_all(&fixture(), &out).unwrap();
        let wrote: Vec<PathBuf> = [RATIOS, ROOFLINE, LAUNCH_OVERHEAD]
            .iter()
            .map(|f| out.join(f))
            .collect();
        assert_eq!(
            outcomes,
            wrote
                .iter()
                .cloned()
                .map(Outcome::Wrote)
                .collect::<Vec<_>>()
        );
        let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
        let (ratios, roofline, launch) = (read(RATIOS), read(ROOFLINE), read(LAUNCH_OVERHEAD));
        for svg in [&ratios, &roofline, &launch] {
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert!(texts(svg).contains(&"Test GPU, 2026-01-01, tir abc1234 (some workloads at def5678: see the notes of results.json)"));
        }
        let ratio_texts = texts(&ratios);
        for name in [
            "add_small",
            "gemm_small_generated",
            "attention_small",
            "chain_1_stream",
        ] {
            assert!(ratio_texts.contains(&name), "{name} in {ratio_texts:?}");
        }
        // No peer, no bar: decoder_small is not in the ratios; the failed one is nowhere.
        assert!(!ratios.contains("decoder_small"));
        assert!(ratio_texts.contains(&"1.20x") && ratio_texts.contains(&"0.40x"));
        // One value label per bar: 2 + 3 + 1 for the three workloads, 1 + 1 + 1 for the chains
        // with a peer; attention_small's torch.compile is null and chain_10_graph has none.
        let bar_labels = ratio_texts.iter().filter(|t| is_ratio_label(t)).count();
        assert_eq!(bar_labels, 9, "{ratio_texts:?}");
        let roof_texts = texts(&roofline);
        for name in [
            "add_small",
            "gemm_small_generated",
            "attention_small",
            "decoder_small",
        ] {
            assert!(roof_texts.contains(&name), "{name} in {roof_texts:?}");
        }
        assert!(roof_texts.contains(&"90%") && roof_texts.contains(&"75%"));
        assert!(!roofline.contains("chain_1_stream") && !roofline.contains("broken_one"));
        let launch_texts = texts(&launch);
        for label in [
            "tir, stream launches",
            "tir, CUDA graph",
            "eager, stream launches",
            "eager, CUDA graph",
        ] {
            assert!(launch_texts.contains(&label), "{label} in {launch_texts:?}");
        }
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 3, "no temporary files left: {left:?}");
    }

    #[test]
    fn a_run_without_chains_skips_the_launch_chart() {
        let mut run = fixture();
        run.workloads.retain(|w| w.chain.is_none());
        let dir = tempfile::tempdir().unwrap();
        let outcomes = draw_all(&run, dir.path()).unwrap();
        assert_eq!(
            outcomes[2],
            Outcome::Skipped {
                file: LAUNCH_OVERHEAD,
                why: "no launch-overhead chains"
            }
        );
        assert!(!dir.path().join(LAUNCH_OVERHEAD).exists());
        assert!(dir.path().join(RATIOS).exists());
    }

    #[test]
    fn rows_are_named_from_the_top() {
        let names = [
            "first".to_string(),
            "second".to_string(),
            "third".to_string(),
        ];
        assert_eq!(row_name(&names, 2.5), "first");
        assert_eq!(row_name(&names, 0.5), "third");
        assert_eq!(row_name(&names, 3.5), "");
    }

    #[test]
    fn log_ticks_are_one_two_five_per_decade() {
        assert_eq!(log_ticks(0.15, 12.0), [0.2, 0.5, 1.0, 2.0, 5.0, 10.0]);
    }
}
