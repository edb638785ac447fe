//! `intcollector plot`: charts of what intcollector printed with --json,
//! for scripted evaluations. Panels, as the input has the records:
//! AM-PM loss and delay per interval per flow (joined interval lines: the
//! mean delay, or the delay-marked packet's where loss voids the mean),
//! the hop latency CDF per node (report lines), INT-label coverage per
//! window (int_label_coverage lines), and any evaluation's own line charts
//! (plot_point lines: one panel per chart). SVG or PNG by the output's
//! extension.

use std::collections::BTreeMap;
use std::io::BufRead;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

/// Which panels to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Every panel the input has records for.
    Auto,
    Ampm,
    HopLatencyCdf,
    LabelCoverage,
    /// The charts of plot_point lines.
    Series,
}

/// A chart of plot_point lines: `{"type": "plot_point", "chart": TITLE,
/// "x_label": .., "y_label": .., "series": NAME, "x": NUMBER, "y": NUMBER}`
/// (the labels from the chart's first point).
#[derive(Debug, Default)]
pub struct Chart {
    pub x_label: String,
    pub y_label: String,
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
}

/// The records a plot is drawn from.
#[derive(Debug, Default)]
pub struct Records {
    /// Per flow: (interval, loss packets, mean delay ns or the marked packet's).
    pub ampm: BTreeMap<String, Vec<(u64, i64, Option<i64>)>>,
    /// Per node ID: hop latencies (ns).
    pub hop_latency: BTreeMap<u64, Vec<u64>>,
    /// (window end ns, coverage by arrival, coverage by label time).
    pub coverage: Vec<(u64, f64, f64)>,
    /// plot_point charts by title.
    pub charts: BTreeMap<String, Chart>,
    /// JSON lines of other kinds (summaries, events, ...), not drawn.
    pub other: u64,
}

impl Records {
    /// Reads JSON lines; a line that is not a JSON object is an error naming it.
    pub fn read(r: impl BufRead) -> Result<Records, String> {
        let mut out = Records::default();
        for (i, line) in r.lines().enumerate() {
            let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
            if line.trim().is_empty() {
                continue;
            }
            let v: Value =
                serde_json::from_str(&line).map_err(|e| format!("line {}: not a JSON record: {e}", i + 1))?;
            if !v.is_object() {
                return Err(format!("line {}: not a JSON object", i + 1));
            }
            out.add(&v, i + 1)?;
        }
        Ok(out)
    }

    fn add(&mut self, v: &Value, line: usize) -> Result<(), String> {
        let num = |k: &str| v[k].as_f64().ok_or(format!("line {line}: {k} is not a number"));
        // Reports have no "type" (analytics records do, and count their hops).
        if v.get("type").is_none() && v.get("hops").is_some() && v.get("seq").is_some() {
            for h in v["hops"].as_array().ok_or(format!("line {line}: hops is not a list"))? {
                if let (Some(n), Some(l)) = (h["node_id"].as_u64(), h["hop_latency_ns"].as_u64()) {
                    self.hop_latency.entry(n).or_default().push(l);
                }
            }
        } else if v.get("loss_packets").is_some() && v.get("interval").is_some() && v.get("flow").is_some() {
            let interval = v["interval"].as_u64().ok_or(format!("line {line}: interval is not a number"))?;
            let flow = v["flow"].as_str().unwrap_or("?").to_string();
            let delay = v["mean_delay_ns"].as_i64().or(v["delay_ns"].as_i64());
            self.ampm.entry(flow).or_default().push((interval, v["loss_packets"].as_i64().unwrap_or(0), delay));
        } else if v["type"] == "int_label_coverage" {
            let end = v["end_ns"].as_u64().ok_or(format!("line {line}: end_ns is not a number"))?;
            self.coverage.push((end, num("coverage_arrival")?, num("coverage_label")?));
        } else if v["type"] == "plot_point" {
            let text = |k: &str| v[k].as_str().ok_or(format!("line {line}: {k} is not a string"));
            let (x, y) = (num("x")?, num("y")?);
            let chart = self.charts.entry(text("chart")?.to_string()).or_insert_with(|| Chart {
                x_label: v["x_label"].as_str().unwrap_or("").to_string(),
                y_label: v["y_label"].as_str().unwrap_or("").to_string(),
                series: BTreeMap::new(),
            });
            chart.series.entry(text("series")?.to_string()).or_default().push((x, y));
        } else {
            self.other += 1;
        }
        Ok(())
    }

    fn panels(&self, kind: Kind) -> Vec<Kind> {
        let have = [
            (Kind::Ampm, !self.ampm.is_empty()),
            (Kind::HopLatencyCdf, !self.hop_latency.is_empty()),
            (Kind::LabelCoverage, !self.coverage.is_empty()),
            (Kind::Series, !self.charts.is_empty()),
        ];
        have.iter().filter(|(k, h)| *h && (kind == Kind::Auto || kind == *k)).map(|(k, _)| *k).collect()
    }

    /// Rows the panels stack in: AM-PM takes two (loss, delay), each
    /// plot_point chart one.
    fn rows(&self, panels: &[Kind]) -> usize {
        panels
            .iter()
            .map(|k| match k {
                Kind::Ampm => 2,
                Kind::Series => self.charts.len(),
                _ => 1,
            })
            .sum()
    }
}

type Err = Box<dyn std::error::Error>;

/// Draws `kind` from `rec` into `out` (.svg or .png); returns the panels drawn.
pub fn draw(rec: &Records, kind: Kind, out: &std::path::Path) -> Result<Vec<Kind>, String> {
    let panels = rec.panels(kind);
    if panels.is_empty() {
        return Err(match kind {
            Kind::Auto => "the input has no AM-PM intervals, reports, coverage or plot_point lines to plot".to_string(),
            k => format!("the input has no records for {k:?}"),
        });
    }
    // Panels stack; AM-PM takes two rows (loss, delay).
    let rows = rec.rows(&panels);
    let size = (960u32, 320 * rows as u32);
    let res = match out.extension().and_then(|e| e.to_str()) {
        Some("svg") => render(SVGBackend::new(out, size).into_drawing_area(), rec, &panels),
        Some("png") => render(BitMapBackend::new(out, size).into_drawing_area(), rec, &panels),
        _ => return Err(format!("--out {}: the name must end in .svg or .png", out.display())),
    };
    res.map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(panels)
}

fn render<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, rec: &Records, panels: &[Kind]) -> Result<(), Err>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let rows = rec.rows(panels);
    let areas = root.split_evenly((rows, 1));
    let mut at = 0;
    for k in panels {
        match k {
            Kind::Ampm => {
                ampm(&areas[at], &areas[at + 1], rec)?;
                at += 2;
            }
            Kind::HopLatencyCdf => {
                cdf(&areas[at], rec)?;
                at += 1;
            }
            Kind::Series => {
                for (title, chart) in &rec.charts {
                    series(&areas[at], title, chart)?;
                    at += 1;
                }
            }
            _ => {
                coverage(&areas[at], rec)?;
                at += 1;
            }
        }
    }
    root.present()?;
    Ok(())
}

/// A panel's chart builder: its caption, margins and axis label room.
fn builder<'a, 'b, DB: DrawingBackend>(
    a: &'a DrawingArea<DB, Shift>,
    caption: &str,
    size: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(a);
    b.caption(caption, ("sans-serif", size)).margin(10).x_label_area_size(30).y_label_area_size(60);
    b
}

/// A series' legend entry: a short line in its color.
fn legend_mark(col: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], col)
}

/// The legend box, where the curves leave room for it.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    c: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<(), Err>
where
    DB::ErrorType: 'static,
{
    c.configure_series_labels().position(at).background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    Ok(())
}

fn color(i: usize) -> RGBColor {
    let (r, g, b) = Palette99::pick(i).to_rgba().rgb();
    RGBColor(r, g, b)
}

fn ampm<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, b: &DrawingArea<DB, Shift>, rec: &Records) -> Result<(), Err>
where
    DB::ErrorType: 'static,
{
    let first = rec.ampm.values().flatten().map(|x| x.0).min().unwrap_or(0);
    let last = rec.ampm.values().flatten().map(|x| x.0).max().unwrap_or(0).max(first + 1);
    let xs = 0..(last - first + 1);
    let loss_max = rec.ampm.values().flatten().map(|x| x.1).max().unwrap_or(0).max(1);
    let loss_min = rec.ampm.values().flatten().map(|x| x.1).min().unwrap_or(0).min(0);
    let mut c = builder(a, "AM-PM loss per interval", 18).build_cartesian_2d(xs.clone(), loss_min..loss_max + 1)?;
    c.configure_mesh().x_desc("interval (from the first)").y_desc("packets lost").draw()?;
    for (i, (flow, pts)) in rec.ampm.iter().enumerate() {
        let col = color(i);
        c.draw_series(LineSeries::new(pts.iter().map(|p| (p.0 - first, p.1)), &col))?
            .label(flow.as_str())
            .legend(legend_mark(col));
    }
    legend(&mut c, SeriesLabelPosition::UpperRight)?;
    let delays = || rec.ampm.values().flatten().filter_map(|x| x.2);
    let dmax = delays().max().unwrap_or(1).max(1) as f64 / 1e6;
    let dmin = (delays().min().unwrap_or(0).min(0)) as f64 / 1e6;
    let mut c =
        builder(b, "AM-PM delay per interval (mean delay; the delay-marked packet's where loss voids the mean)", 16)
            .build_cartesian_2d(xs, dmin..dmax * 1.1)?;
    c.configure_mesh().x_desc("interval (from the first)").y_desc("delay (ms)").draw()?;
    for (i, (flow, pts)) in rec.ampm.iter().enumerate() {
        let col = color(i);
        // An interval without either figure breaks the line.
        let mut run = Vec::new();
        for p in pts {
            match p.2 {
                Some(d) => run.push((p.0 - first, d as f64 / 1e6)),
                None => {
                    c.draw_series(LineSeries::new(std::mem::take(&mut run), &col))?;
                }
            }
        }
        c.draw_series(LineSeries::new(run, &col))?.label(flow.as_str()).legend(legend_mark(col));
    }
    legend(&mut c, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

fn cdf<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, rec: &Records) -> Result<(), Err>
where
    DB::ErrorType: 'static,
{
    // Log x: microsecond hops and millisecond outliers on one axis.
    let all = || rec.hop_latency.values().flatten();
    let xmin = (all().copied().min().unwrap_or(1).max(1) as f64 / 1e3).max(0.001);
    let xmax = (all().copied().max().unwrap_or(1) as f64 / 1e3).max(xmin * 10.0);
    let mut c = builder(a, "Hop latency CDF per node", 18)
        .build_cartesian_2d((xmin * 0.9..xmax * 1.1).log_scale(), 0f64..1f64)?;
    c.configure_mesh().x_desc("hop latency (us)").y_desc("fraction of samples").draw()?;
    for (i, (node, v)) in rec.hop_latency.iter().enumerate() {
        let mut s = v.clone();
        s.sort_unstable();
        let n = s.len() as f64;
        let col = color(i);
        let pts = s.iter().enumerate().map(|(k, l)| (*l as f64 / 1e3, (k + 1) as f64 / n));
        c.draw_series(LineSeries::new(pts, &col))?
            .label(format!("node {node} ({} samples)", s.len()))
            .legend(legend_mark(col));
    }
    legend(&mut c, SeriesLabelPosition::LowerRight)?;
    Ok(())
}

fn coverage<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, rec: &Records) -> Result<(), Err>
where
    DB::ErrorType: 'static,
{
    let t0 = rec.coverage.iter().map(|c| c.0).min().unwrap_or(0);
    let t1 = rec.coverage.iter().map(|c| c.0).max().unwrap_or(0).max(t0 + 1);
    let low = rec.coverage.iter().map(|c| c.1.min(c.2)).fold(1.0f64, f64::min).min(0.9);
    let mut c = builder(a, "INT-label coverage per window", 18)
        .build_cartesian_2d(0f64..(t1 - t0) as f64 / 1e9, (low * 100.0).floor()..100.5)?;
    c.configure_mesh().x_desc("time (s)").y_desc("coverage (%)").draw()?;
    for (i, (name, pick)) in [("by arrival", 1usize), ("by label time", 2)].into_iter().enumerate() {
        let col = color(i);
        let pts = rec.coverage.iter().map(|c| ((c.0 - t0) as f64 / 1e9, 100.0 * if pick == 1 { c.1 } else { c.2 }));
        c.draw_series(LineSeries::new(pts, &col))?.label(name).legend(legend_mark(col));
    }
    legend(&mut c, SeriesLabelPosition::LowerRight)?;
    Ok(())
}

/// A plot_point chart: each series a line with its points marked, in x order.
fn series<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, title: &str, chart: &Chart) -> Result<(), Err>
where
    DB::ErrorType: 'static,
{
    let pts = || chart.series.values().flatten();
    let (x0, x1) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| (l.min(p.0), h.max(p.0)));
    let (y0, y1) = pts().fold((0f64, f64::NEG_INFINITY), |(l, h), p| (l.min(p.1), h.max(p.1)));
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let y1 = if y1 > y0 { y1 * 1.1 } else { y0 + 1.0 };
    let mut c = builder(a, title, 18).build_cartesian_2d(x0..x1, y0..y1)?;
    c.configure_mesh().x_desc(chart.x_label.as_str()).y_desc(chart.y_label.as_str()).draw()?;
    for (i, (name, s)) in chart.series.iter().enumerate() {
        let col = color(i);
        let mut s = s.clone();
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
        c.draw_series(LineSeries::new(s.iter().copied(), &col))?.label(name.as_str()).legend(legend_mark(col));
        c.draw_series(s.iter().map(|p| Circle::new(*p, 3, col.filled())))?;
    }
    legend(&mut c, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> String {
        let mut s = String::new();
        for i in 0..5u64 {
            s += &format!(
                "{{\"flow\":\"f1\",\"interval\":{},\"loss_packets\":{},\"mean_delay_ns\":{},\"packets\":100}}\n",
                100 + i,
                i % 2,
                if i % 2 == 0 { "2000000".to_string() } else { "null".to_string() }
            );
            s += &format!(
                "{{\"seq\":{i},\"node_id\":3,\"hops\":[{{\"node_id\":1,\"hop_latency_ns\":{}}},{{\"node_id\":2,\"hop_latency_ns\":{}}}]}}\n",
                1000 + i * 100,
                3000 + i
            );
        }
        s += "{\"summary\":{\"reports\":5}}\n";
        s
    }

    #[test]
    fn reads_intervals_reports_and_skips_other_lines() {
        let r = Records::read(input().as_bytes()).unwrap();
        assert_eq!(r.ampm["f1"].len(), 5);
        assert_eq!(r.ampm["f1"][1], (101, 1, None));
        assert_eq!(r.hop_latency[&1], vec![1000, 1100, 1200, 1300, 1400]);
        assert_eq!(r.other, 1);
        assert_eq!(r.panels(Kind::Auto), vec![Kind::Ampm, Kind::HopLatencyCdf]);
        assert_eq!(r.panels(Kind::LabelCoverage), vec![]);
    }

    #[test]
    fn input_that_is_not_records_names_the_line() {
        let e = Records::read("{\"a\":1}\nnot json\n".as_bytes()).unwrap_err();
        assert!(e.starts_with("line 2: not a JSON record"), "{e}");
        let e = Records::read("[1,2]\n".as_bytes()).unwrap_err();
        assert_eq!(e, "line 1: not a JSON object");
        let e = Records::read("{\"type\":\"int_label_coverage\",\"end_ns\":\"x\"}\n".as_bytes()).unwrap_err();
        assert!(e.contains("line 1: end_ns"), "{e}");
    }

    #[test]
    fn draws_svg_and_png_and_refuses_other_names_and_empty_input() {
        let r = Records::read(input().as_bytes()).unwrap();
        let dir = std::env::temp_dir().join(format!("intcollector-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("p.svg");
        assert_eq!(draw(&r, Kind::Auto, &svg).unwrap().len(), 2);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            text.contains("<svg") && text.contains("AM-PM loss per interval") && text.contains("node 2 (5 samples)")
        );
        let png = dir.join("p.png");
        draw(&r, Kind::HopLatencyCdf, &png).unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        assert!(draw(&r, Kind::Auto, &dir.join("p.jpg")).unwrap_err().contains("must end in .svg or .png"));
        assert!(draw(&Records::default(), Kind::Auto, &svg).unwrap_err().contains("no AM-PM intervals"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn plot_point_lines_make_one_chart_per_title() {
        let mut s = String::new();
        for (chart, series, x, y) in
            [("A", "s1", 2.0, 5.0), ("A", "s1", 1.0, 3.0), ("A", "s2", 1.0, 1.0), ("B", "s", 0.0, 9.0)]
        {
            s += &format!(
                "{{\"type\":\"plot_point\",\"chart\":\"{chart}\",\"x_label\":\"loss (%)\",\"y_label\":\"ms\",\"series\":\"{series}\",\"x\":{x},\"y\":{y}}}\n"
            );
        }
        let r = Records::read(s.as_bytes()).unwrap();
        assert_eq!(r.charts.len(), 2);
        assert_eq!(r.charts["A"].series["s1"], vec![(2.0, 5.0), (1.0, 3.0)]);
        assert_eq!(r.charts["A"].x_label, "loss (%)");
        assert_eq!((r.panels(Kind::Auto), r.rows(&[Kind::Series])), (vec![Kind::Series], 2));
        let dir = std::env::temp_dir().join(format!("intcollector-plot-series-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("s.svg");
        draw(&r, Kind::Series, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("loss (%)") && text.contains("\ns2\n") && text.contains("<circle"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
        let e = Records::read(
            "{\"type\":\"plot_point\",\"chart\":\"A\",\"series\":\"s\",\"x\":\"1\",\"y\":2}\n".as_bytes(),
        );
        assert_eq!(e.unwrap_err(), "line 1: x is not a number");
    }
}
