//! The charts of a [`Report`]: plain SVG written by hand, with no script
//! and nothing fetched, so any browser (and GitHub) shows it. `lag.svg`
//! draws each DC's view lag over time; `consumers.svg`, when the scenario
//! has consumers, each consumer zone's same-zone share and error rate.
//! Both mark every applied action of the timeline on the time axis: a
//! dashed line at the time it was applied and a short label.
//!
//! What they draw is the report's [`OverTime`](crate::report::OverTime),
//! window by window (one point per window, at its middle; a gap where a
//! window has no value). Elements carry stable attributes for tools and
//! tests:
//! - a series is `<g class="series" data-dc="DC">` (lag) or
//!   `<g class="series" data-zone="ZONE" data-metric="same-zone-share">`
//!   and `data-metric="error-rate"` (consumers), holding one `<path>`;
//! - an action is `<g class="marker" data-action="ACTION"
//!   data-applied-ms="MS">`, its text as in the report's `schedule`.

use std::fmt::Write as _;

use crate::report::Report;

/// The view lag chart's file.
pub const LAG: &str = crate::report::LAG_CHART.0;
/// The consumers chart's file.
pub const CONSUMERS: &str = crate::report::CONSUMERS_CHART.0;

/// One chart: its file name, what it shows (the image's alt text) and the
/// SVG document.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// The file name, written beside `report.md`.
    pub file: &'static str,
    /// What it shows, in a few words.
    pub alt: &'static str,
    /// The SVG document.
    pub svg: String,
}

impl Report {
    /// The report's charts: [`LAG`] always, [`CONSUMERS`] when the
    /// scenario had consumers.
    pub fn charts(&self) -> Vec<Chart> {
        let mut charts = vec![Chart {
            file: LAG,
            alt: crate::report::LAG_CHART.1,
            svg: lag(self),
        }];
        if self.has_chart(CONSUMERS) {
            charts.push(Chart {
                file: CONSUMERS,
                alt: crate::report::CONSUMERS_CHART.1,
                svg: consumers(self),
            });
        }
        charts
    }
}

const WIDTH: f64 = 880.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const LANE_TOP: f64 = 44.0;
const LANE_ROW: f64 = 14.0;
const LANE_ROWS: usize = 6;
const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const MARKER: &str = "#555555";

/// The report's DCs in the order of their nodes: each DC's colour.
fn colour(report: &Report, dc: &str) -> &'static str {
    let mut dcs: Vec<&str> = Vec::new();
    for d in report.nodes.values() {
        if !dcs.contains(&d.as_str()) {
            dcs.push(d);
        }
    }
    let k = dcs.iter().position(|d| *d == dc).unwrap_or(dcs.len());
    PALETTE[k % PALETTE.len()]
}

/// The DCs in node order.
fn dcs(report: &Report) -> Vec<String> {
    let mut dcs: Vec<String> = Vec::new();
    for d in report.nodes.values() {
        if !dcs.contains(d) {
            dcs.push(d.clone());
        }
    }
    for d in report.over_time.view_lag_ms.keys() {
        if !dcs.contains(d) {
            dcs.push(d.clone());
        }
    }
    dcs
}

/// Escapes text for an attribute or element content.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A number for a tick label: no trailing zeros.
fn num(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// A step of 1, 2, 2.5 or 5 times a power of ten giving about `ticks`
/// ticks up to `max`.
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    let n = raw / magnitude;
    let nice = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 2.5 {
        2.5
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// A plot area and its scales: x in seconds from 0, y from 0.
struct Frame {
    top: f64,
    height: f64,
    x_max: f64,
    y_max: f64,
}

impl Frame {
    fn right() -> f64 {
        WIDTH - RIGHT
    }

    fn bottom(&self) -> f64 {
        self.top + self.height
    }

    fn x(&self, s: f64) -> f64 {
        LEFT + (s / self.x_max).clamp(0.0, 1.0) * (Self::right() - LEFT)
    }

    fn y(&self, v: f64) -> f64 {
        self.bottom() - (v / self.y_max).clamp(0.0, 1.0) * self.height
    }

    /// The frame, the y grid and ticks with their labels, and the y axis
    /// title; x ticks (with labels when `x_labels`).
    fn axes(&self, svg: &mut String, y_step: f64, y_title: &str, x_labels: bool) {
        let (l, r, t, b) = (LEFT, Self::right(), self.top, self.bottom());
        let _ = writeln!(svg, "<g class=\"axes\" font-size=\"11\" fill=\"#333\">");
        let mut v = 0.0;
        while v <= self.y_max * 1.0001 {
            let y = self.y(v);
            let _ = writeln!(
                svg,
                "<line x1=\"{l:.1}\" y1=\"{y:.1}\" x2=\"{r:.1}\" y2=\"{y:.1}\" stroke=\"#e6e6e6\"/>\
                 <line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{l:.1}\" y2=\"{y:.1}\" stroke=\"#333\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                l - 4.0,
                l - 7.0,
                y + 4.0,
                num(v)
            );
            v += y_step;
        }
        let x_step = nice_step(self.x_max, 8.0);
        let mut s = 0.0;
        while s <= self.x_max * 1.0001 {
            let x = self.x(s);
            let _ = write!(
                svg,
                "<line x1=\"{x:.1}\" y1=\"{b:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#333\"/>",
                b + 4.0
            );
            if x_labels {
                let _ = write!(
                    svg,
                    "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                    b + 17.0,
                    num(s)
                );
            }
            let _ = writeln!(svg);
            s += x_step;
        }
        let mid = (t + b) / 2.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{l:.1}\" y=\"{t:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#333\"/>\
             <text x=\"18\" y=\"{mid:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {mid:.1})\">{}</text>",
            r - l,
            b - t,
            esc(y_title)
        );
        if x_labels {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time from the start of the workload (s)</text>",
                (l + r) / 2.0,
                b + 33.0
            );
        }
        let _ = writeln!(svg, "</g>");
    }

    /// A `<path>` through the values, one per window at its middle,
    /// broken where a window has none.
    fn path(&self, values: &[Option<f64>], window_s: f64, scale: f64, pen: Pen) -> String {
        let mut d = String::new();
        let mut pen_down = false;
        for (k, v) in values.iter().enumerate() {
            match v {
                Some(v) => {
                    let x = self.x((k as f64 + 0.5) * window_s);
                    let y = self.y(v * scale);
                    let _ = write!(
                        d,
                        "{}{x:.1} {y:.1}",
                        match (pen_down, d.is_empty()) {
                            (true, _) => " L",
                            (false, true) => "M",
                            (false, false) => " M",
                        }
                    );
                    pen_down = true;
                }
                None => pen_down = false,
            }
        }
        format!(
            "<path d=\"{d}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" \
             stroke-linejoin=\"round\" stroke-linecap=\"round\"/>",
            pen.colour, pen.width
        )
    }
}

/// How a series is drawn: the `k`-th of `n` is drawn 1 px wider than the
/// next, so that where series coincide each still shows.
#[derive(Debug, Clone, Copy)]
struct Pen {
    colour: &'static str,
    width: f64,
}

impl Pen {
    fn of(report: &Report, dc: &str, k: usize, n: usize) -> Self {
        Pen {
            colour: colour(report, dc),
            width: 1.5 + n.saturating_sub(k + 1) as f64,
        }
    }
}

/// An applied action placed on the time axis.
struct Marker {
    action: String,
    applied_ms: u64,
    label: String,
    x: f64,
    row: usize,
    anchor_end: bool,
}

/// The short label of an action: its first two words, the second cut at
/// `=` (`link hz-sh=300ms` → `link hz-sh`, `pause-provider sh/1 8000ms` →
/// `pause-provider sh/1`).
fn short(action: &str) -> String {
    let mut words = action.split_whitespace();
    let first = words.next().unwrap_or_default();
    match words.next() {
        Some(second) => {
            let second = second.split('=').next().unwrap_or_default();
            format!("{first} {second}")
        }
        None => first.to_owned(),
    }
}

/// The report's applied actions, their labels set in rows above the plot
/// so that none overlaps another; and how many rows that took.
fn markers(report: &Report, x_max: f64) -> (Vec<Marker>, usize) {
    let frame = Frame {
        top: 0.0,
        height: 1.0,
        x_max,
        y_max: 1.0,
    };
    let mut row_ends: Vec<f64> = Vec::new();
    let mut out = Vec::new();
    let mut steps: Vec<_> = report.schedule.iter().collect();
    steps.sort_by_key(|s| s.applied_ms);
    for step in steps {
        let label = short(&step.action);
        let x = frame.x(step.applied_ms as f64 / 1000.0);
        let width = label.chars().count() as f64 * 6.2 + 4.0;
        let anchor_end = x + 3.0 + width > Frame::right();
        let (from, to) = if anchor_end {
            (x - 3.0 - width, x)
        } else {
            (x, x + 3.0 + width)
        };
        let row = match row_ends.iter().position(|end| *end + 4.0 < from) {
            Some(row) => row,
            None if row_ends.len() < LANE_ROWS => {
                row_ends.push(f64::MIN);
                row_ends.len() - 1
            }
            None => (0..row_ends.len())
                .min_by(|a, b| row_ends[*a].total_cmp(&row_ends[*b]))
                .unwrap_or(0),
        };
        row_ends[row] = row_ends[row].max(to);
        out.push(Marker {
            action: step.action.clone(),
            applied_ms: step.applied_ms,
            label,
            x,
            row,
            anchor_end,
        });
    }
    (out, row_ends.len())
}

/// Draws the markers, each a dashed line from its label down to `bottom`.
fn draw_markers(svg: &mut String, markers: &[Marker], bottom: f64) {
    let _ = writeln!(svg, "<g class=\"markers\" font-size=\"11\" fill=\"#333\">");
    for m in markers {
        let text_y = LANE_TOP + (m.row as f64 + 1.0) * LANE_ROW - 3.0;
        let line_top = text_y - 9.0;
        let (text_x, anchor) = if m.anchor_end {
            (m.x - 3.0, "end")
        } else {
            (m.x + 3.0, "start")
        };
        let _ = writeln!(
            svg,
            "<g class=\"marker\" data-action=\"{}\" data-applied-ms=\"{}\">\
             <title>{} s: {}</title>\
             <line x1=\"{x:.1}\" y1=\"{line_top:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" stroke=\"{MARKER}\" stroke-dasharray=\"4 3\"/>\
             <text x=\"{text_x:.1}\" y=\"{text_y:.1}\" text-anchor=\"{anchor}\">{}</text></g>",
            esc(&m.action),
            m.applied_ms,
            num(m.applied_ms as f64 / 1000.0),
            esc(&m.action),
            esc(&m.label),
            x = m.x,
        );
    }
    let _ = writeln!(svg, "</g>");
}

/// A legend row at `y`: a swatch and a name per series, then the marker.
fn legend(svg: &mut String, y: f64, items: &[(String, &str)], markers: bool) {
    let _ = writeln!(svg, "<g class=\"legend\" font-size=\"12\" fill=\"#333\">");
    let mut x = LEFT;
    for (name, colour) in items {
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 20.0,
            x + 25.0,
            y + 4.0,
            esc(name)
        );
        x += 25.0 + name.chars().count() as f64 * 7.0 + 18.0;
    }
    if markers {
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{MARKER}\" stroke-dasharray=\"4 3\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">an action of the timeline, when applied</text>",
            y - 7.0,
            y + 7.0,
            x + 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(svg, "</g>");
}

fn open(svg: &mut String, height: f64, title: &str) {
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {WIDTH} {height:.0}\" font-family=\"Helvetica, Arial, sans-serif\">\n\
         <title>{}</title>\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n\
         <text x=\"{LEFT}\" y=\"24\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">{}</text>",
        esc(title),
        esc(title)
    );
}

fn subtitle(svg: &mut String, text: &str) {
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"40\" font-size=\"11\" fill=\"#555\">{}</text>",
        esc(text)
    );
}

/// The workload's length in seconds (at least a millisecond).
fn x_max(report: &Report) -> f64 {
    (report.duration_ms.max(1)) as f64 / 1000.0
}

/// `lag.svg`: each DC's view lag over time.
fn lag(report: &Report) -> String {
    let over = &report.over_time;
    let window_s = over.window_ms as f64 / 1000.0;
    let x_max = x_max(report);
    let (markers, rows) = markers(report, x_max);
    let highest = over
        .view_lag_ms
        .values()
        .flatten()
        .flatten()
        .fold(0.0_f64, |a, b| a.max(*b));
    let y_step = nice_step(highest.max(1.0), 5.0);
    let frame = Frame {
        top: LANE_TOP + rows as f64 * LANE_ROW + 8.0,
        height: 260.0,
        x_max,
        y_max: (highest.max(1.0) / y_step).ceil() * y_step,
    };
    let height = frame.bottom() + 72.0;
    let mut svg = String::new();
    open(
        &mut svg,
        height,
        &format!("{}: view lag per DC", report.scenario),
    );
    subtitle(
        &mut svg,
        &format!(
            "the highest lag sampled on the DC's live nodes in each {} ms window",
            over.window_ms
        ),
    );
    frame.axes(&mut svg, y_step, "view lag (ms)", true);
    draw_markers(&mut svg, &markers, frame.bottom());
    let dcs = dcs(report);
    for (k, dc) in dcs.iter().enumerate() {
        let values = over.view_lag_ms.get(dc).map(Vec::as_slice).unwrap_or(&[]);
        let _ = writeln!(
            svg,
            "<g class=\"series\" data-dc=\"{}\">{}</g>",
            esc(dc),
            frame.path(values, window_s, 1.0, Pen::of(report, dc, k, dcs.len()))
        );
    }
    let items: Vec<(String, &str)> = dcs
        .iter()
        .map(|dc| (dc.clone(), colour(report, dc)))
        .collect();
    legend(&mut svg, frame.bottom() + 56.0, &items, !markers.is_empty());
    svg.push_str("</svg>\n");
    svg
}

/// `consumers.svg`: each consumer zone's same-zone share (above) and
/// error rate (below) over time.
fn consumers(report: &Report) -> String {
    let over = &report.over_time;
    let window_s = over.window_ms as f64 / 1000.0;
    let x_max = x_max(report);
    let (markers, rows) = markers(report, x_max);
    let share = Frame {
        top: LANE_TOP + rows as f64 * LANE_ROW + 8.0,
        height: 170.0,
        x_max,
        y_max: 100.0,
    };
    let highest = over
        .consumers
        .values()
        .flat_map(|z| z.error_rate.iter().flatten())
        .fold(0.0_f64, |a, b| a.max(*b * 100.0));
    let rate_step = nice_step(highest.max(1.0), 4.0);
    let rate = Frame {
        top: share.bottom() + 18.0,
        height: 130.0,
        x_max,
        y_max: (highest.max(1.0) / rate_step).ceil() * rate_step,
    };
    let height = rate.bottom() + 72.0;
    let mut svg = String::new();
    open(
        &mut svg,
        height,
        &format!(
            "{}: same-zone share and error rate per consumer zone",
            report.scenario
        ),
    );
    subtitle(
        &mut svg,
        &format!(
            "calls by the {} ms window they started in; same-zone share of the answered ones",
            over.window_ms
        ),
    );
    share.axes(&mut svg, 25.0, "same-zone share (%)", false);
    rate.axes(&mut svg, rate_step, "error rate (%)", true);
    draw_markers(&mut svg, &markers, rate.bottom());
    let mut drawn: Vec<&str> = Vec::new();
    for c in &report.consumers {
        if !drawn.contains(&c.zone.as_str()) {
            drawn.push(&c.zone);
        }
    }
    for (k, zone) in drawn.iter().enumerate() {
        let series = over.consumers.get(*zone).cloned().unwrap_or_default();
        let c = Pen::of(report, zone, k, drawn.len());
        let _ = writeln!(
            svg,
            "<g class=\"series\" data-zone=\"{z}\" data-metric=\"same-zone-share\">{}</g>\n\
             <g class=\"series\" data-zone=\"{z}\" data-metric=\"error-rate\">{}</g>",
            share.path(&series.same_zone_share, window_s, 100.0, c),
            rate.path(&series.error_rate, window_s, 100.0, c),
            z = esc(zone),
        );
    }
    let items: Vec<(String, &str)> = drawn
        .iter()
        .map(|z| (format!("consumers in {z}"), colour(report, z)))
        .collect();
    legend(&mut svg, rate.bottom() + 56.0, &items, !markers.is_empty());
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::report::{AppliedStep, ConsumerReport, OverTime, ZoneOverTime};

    type Element = (String, BTreeMap<String, String>);

    /// The document's elements in order, each with its attributes
    /// (entities resolved); an error where it is not well-formed XML.
    fn elements(svg: &str) -> Result<Vec<Element>, String> {
        let document = roxmltree::Document::parse(svg).map_err(|e| e.to_string())?;
        Ok(document
            .descendants()
            .filter(roxmltree::Node::is_element)
            .map(|node| {
                let attributes = node
                    .attributes()
                    .map(|a| (a.name().to_owned(), a.value().to_owned()))
                    .collect();
                (node.tag_name().name().to_owned(), attributes)
            })
            .collect())
    }

    /// The values of `attr` on `<g class="CLASS">` elements.
    fn groups(elements: &[Element], class: &str, attr: &str) -> Vec<String> {
        elements
            .iter()
            .filter(|(name, a)| name == "g" && a.get("class").is_some_and(|c| c == class))
            .map(|(_, a)| a.get(attr).cloned().unwrap_or_default())
            .collect()
    }

    fn consumer(zone: &str) -> ConsumerReport {
        ConsumerReport {
            zone: zone.to_owned(),
            calls: 10,
            errors: 1,
            error_rate: 0.1,
            same_zone_share: 0.9,
            same_zone_share_healthy: 1.0,
            idempotent_failed_during_fault: 0,
            non_idempotent_failed_during_fault: 1,
            no_provider: 0,
            stale_calls: 0,
            p50_ms: 5.0,
            p99_ms: 50.0,
            back_in_zone_after_restore_ms: None,
        }
    }

    fn report(with_consumers: bool) -> Report {
        let schedule = [
            (2_000, "partition hz|sh"),
            (2_100, "link hz->sh=300ms~20ms,loss=5%"),
            (5_000, "heal"),
            (9_950, "pause-provider sh/1 8000ms"),
        ]
        .iter()
        .map(|(at, action)| AppliedStep {
            at_ms: *at,
            action: (*action).to_owned(),
            applied_ms: at + 2,
        })
        .collect();
        let lag = |high: f64| {
            (0..100)
                .map(|k| match k {
                    40..=49 => None,
                    20..=49 => Some(high),
                    _ => Some(f64::from(k % 7) + 1.0),
                })
                .collect::<Vec<_>>()
        };
        let zone = |share: f64| ZoneOverTime {
            calls: vec![10; 100],
            error_rate: (0..100).map(|k| Some(f64::from(k % 3) / 20.0)).collect(),
            same_zone_share: (0..100).map(|k| (k != 50).then_some(share)).collect(),
        };
        Report {
            scenario: "a<b>&c".to_owned(),
            seed: 1,
            scale: 1.0,
            nodes: BTreeMap::from([
                (1, "hz".to_owned()),
                (2, "hz".to_owned()),
                (3, "sh".to_owned()),
            ]),
            duration_ms: 10_000,
            dcs: BTreeMap::new(),
            writes: Default::default(),
            watch: Default::default(),
            converge: Vec::new(),
            schedule,
            loss_patterns: BTreeMap::new(),
            settled: true,
            consumers: if with_consumers {
                vec![consumer("hz"), consumer("sh")]
            } else {
                Vec::new()
            },
            stale_window: BTreeMap::new(),
            provider_faults: Vec::new(),
            call_loss_patterns: BTreeMap::new(),
            over_time: OverTime {
                window_ms: 100,
                view_lag_ms: BTreeMap::from([
                    ("hz".to_owned(), lag(30.0)),
                    ("sh".to_owned(), lag(2_345.6)),
                ]),
                consumers: if with_consumers {
                    BTreeMap::from([("hz".to_owned(), zone(0.75)), ("sh".to_owned(), zone(1.0))])
                } else {
                    BTreeMap::new()
                },
            },
        }
    }

    fn actions(report: &Report) -> Vec<String> {
        report.schedule.iter().map(|s| s.action.clone()).collect()
    }

    #[test]
    fn the_lag_chart_has_a_series_per_dc_and_a_marker_per_applied_action() {
        let report = report(false);
        let charts = report.charts();
        assert_eq!(charts.iter().map(|c| c.file).collect::<Vec<_>>(), [LAG]);
        let svg = &charts[0].svg;
        let elements = elements(svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert_eq!(elements[0].0, "svg");
        assert_eq!(groups(&elements, "series", "data-dc"), ["hz", "sh"]);
        assert_eq!(groups(&elements, "marker", "data-action"), actions(&report));
        assert_eq!(
            groups(&elements, "marker", "data-applied-ms"),
            ["2002", "2102", "5002", "9952"]
        );
        // Each series is one path, broken where its DC had no sample.
        let paths: Vec<&String> = elements
            .iter()
            .filter(|(name, _)| name == "path")
            .map(|(_, a)| &a["d"])
            .collect();
        assert_eq!(paths.len(), 2);
        for d in paths {
            assert_eq!(d.matches('M').count(), 2, "{d}");
            assert_eq!(d.matches('L').count(), 90 - 2, "{d}");
        }
        // The y axis reaches past the highest lag: 2345.6 ms, ticks of 500.
        assert!(svg.contains(">2500</text>"), "{svg}");
        assert!(!svg.contains(">3000</text>"), "{svg}");
        assert!(report
            .markdown()
            .contains("\n![view lag per DC](lag.svg)\n"));
        assert!(!report.markdown().contains("consumers.svg"));
    }

    #[test]
    fn the_consumers_chart_has_two_series_per_zone_and_a_marker_per_applied_action() {
        let report = report(true);
        let charts = report.charts();
        assert_eq!(
            charts.iter().map(|c| c.file).collect::<Vec<_>>(),
            [LAG, CONSUMERS]
        );
        let svg = &charts[1].svg;
        let elements = elements(svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert_eq!(
            groups(&elements, "series", "data-zone"),
            ["hz", "hz", "sh", "sh"]
        );
        assert_eq!(
            groups(&elements, "series", "data-metric"),
            [
                "same-zone-share",
                "error-rate",
                "same-zone-share",
                "error-rate"
            ]
        );
        assert_eq!(groups(&elements, "marker", "data-action"), actions(&report));
        let md = report.markdown();
        assert!(
            md.contains("\n![same-zone share and error rate per consumer zone](consumers.svg)\n")
        );
        assert!(md.contains("\n![view lag per DC](lag.svg)\n"));
    }

    #[test]
    fn marker_labels_are_short_and_do_not_overlap() {
        assert_eq!(short("link hz-sh=300ms"), "link hz-sh");
        assert_eq!(short("pause-provider sh/1 8000ms"), "pause-provider sh/1");
        assert_eq!(short("heal"), "heal");
        let report = report(false);
        let (markers, rows) = markers(&report, 10.0);
        // partition and link are 100 ms apart: two rows.
        assert_eq!(rows, 2);
        assert_eq!(
            markers.iter().map(|m| m.row).collect::<Vec<_>>(),
            [0, 1, 0, 0]
        );
        // The last one is near the right edge: its label ends at its line.
        assert!(markers[3].anchor_end);
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(2345.6, 5.0), 500.0);
        assert_eq!(nice_step(10.0, 8.0), 2.0);
        assert_eq!(nice_step(1.0, 4.0), 0.25);
        assert_eq!(num(0.25), "0.25");
        assert_eq!(num(2.5), "2.5");
        assert_eq!(num(30.0), "30");
    }
}
