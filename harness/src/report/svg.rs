//! One SVG timeline per scenario: a lane per replica with its terms, fault spans shaded, the
//! gauge sum and the pg_locks holder over time.

use std::time::Duration;

use svg::node::element::{Line, Polyline, Rectangle, Text, Title};
use svg::{Document, Node as _};

use crate::check::leadership_spans;
use crate::timeline::{fault_spans, Entry, What};

const LANE: f64 = 28.0;
const LEFT: f64 = 130.0;
const WIDTH: f64 = 1000.0;
const PALETTE: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948",
];

fn text(x: f64, y: f64, s: &str) -> Text {
    Text::new(s)
        .set("x", x)
        .set("y", y)
        .set("font-family", "sans-serif")
        .set("font-size", 12)
}

/// Renders the timeline of one scenario; `replicas` fixes the lane order.
pub fn render(title: &str, entries: &[Entry], replicas: &[String], t: Duration) -> String {
    let end_ms = entries.last().map_or(1.0, |e| e.t_ms).max(1.0);
    let lanes = replicas.len() as f64;
    let gauge_top = 40.0 + lanes * LANE + 20.0;
    let mut c = Canvas {
        doc: Document::new(),
        end_ms,
        lanes,
        gauge_top,
        locks_y: gauge_top + 70.0,
        replicas,
    };
    c.header(title, t);
    c.grid(t);
    c.faults(entries);
    c.terms(entries);
    c.gauge_sum(entries);
    c.lock_holder(entries);
    c.doc.to_string()
}

/// The picture as it is drawn, layer by layer, and its geometry.
struct Canvas<'a> {
    doc: Document,
    end_ms: f64,
    lanes: f64,
    gauge_top: f64,
    locks_y: f64,
    replicas: &'a [String],
}

impl Canvas<'_> {
    /// The x coordinate of `ms` since the start.
    fn x(&self, ms: f64) -> f64 {
        LEFT + ms / self.end_ms * WIDTH
    }

    fn add(&mut self, node: impl svg::Node) {
        self.doc.append(node);
    }

    fn header(&mut self, title: &str, t: Duration) {
        let height = self.locks_y + 60.0;
        self.doc
            .assign("viewBox", (0, 0, LEFT + WIDTH + 20.0, height));
        self.doc.assign("width", LEFT + WIDTH + 20.0);
        self.doc.assign("height", height);
        self.add(
            Rectangle::new()
                .set("width", "100%")
                .set("height", "100%")
                .set("fill", "white"),
        );
        let heading = format!(
            "{title} — T = {} ms, {:.1} s",
            t.as_millis(),
            self.end_ms / 1000.0
        );
        self.add(text(10.0, 20.0, &heading).set("font-size", 14));
    }

    /// Grid lines every T (every 5 T when there are many).
    fn grid(&mut self, t: Duration) {
        let t_ms = t.as_secs_f64() * 1000.0;
        let step = if self.end_ms / t_ms > 60.0 {
            5.0 * t_ms
        } else {
            t_ms
        };
        let mut k = 0.0;
        while k <= self.end_ms {
            let x = self.x(k);
            let line = Line::new()
                .set("x1", x)
                .set("x2", x)
                .set("y1", 30.0)
                .set("y2", self.locks_y + 20.0)
                .set("stroke", "#eee");
            self.add(line);
            k += step;
        }
    }

    /// Fault spans, shaded over all lanes.
    fn faults(&mut self, entries: &[Entry]) {
        for f in fault_spans(entries) {
            let label = format!("{} {}", f.verb, f.target);
            let (s, e) = (f.applied_ms, f.lifted_ms.unwrap_or(self.end_ms));
            let shade = Rectangle::new()
                .set("x", self.x(s))
                .set("y", 30.0)
                .set("width", (self.x(e) - self.x(s)).max(2.0))
                .set("height", self.lanes * LANE + 10.0)
                .set("fill", "#d62728")
                .set("fill-opacity", 0.12)
                .add(Title::new(label.as_str()));
            self.add(shade);
            let y = 40.0 + self.lanes * LANE + 12.0;
            let caption = text(self.x(s) + 2.0, y, &label)
                .set("fill", "#d62728")
                .set("font-size", 10);
            self.add(caption);
        }
    }

    /// A lane per replica: its terms.
    fn terms(&mut self, entries: &[Entry]) {
        let spans = leadership_spans(entries, self.end_ms);
        for (i, r) in self.replicas.iter().enumerate() {
            let y = 40.0 + i as f64 * LANE;
            self.add(text(10.0, y + 16.0, r));
            self.add(
                Line::new()
                    .set("x1", LEFT)
                    .set("x2", LEFT + WIDTH)
                    .set("y1", y + 12.0)
                    .set("y2", y + 12.0)
                    .set("stroke", "#ccc"),
            );
            for (s, e) in spans.get(r).into_iter().flatten() {
                let term = Rectangle::new()
                    .set("x", self.x(*s))
                    .set("y", y + 2.0)
                    .set("width", (self.x(*e) - self.x(*s)).max(1.0))
                    .set("height", 20.0)
                    .set("fill", PALETTE[i % PALETTE.len()])
                    .add(Title::new(format!("{r} leads {:.0}–{:.0} ms", s, e)));
                self.add(term);
            }
        }
    }

    /// The gauge sum over time.
    fn gauge_sum(&mut self, entries: &[Entry]) {
        let base = self.gauge_top + 40.0;
        let points: Vec<String> = (entries.iter())
            .filter_map(|e| match &e.what {
                What::Gauges { values } => Some((e.t_ms, values.values().flatten().sum::<i64>())),
                _ => None,
            })
            .map(|(t_ms, sum)| format!("{:.1},{:.1}", self.x(t_ms), base - sum as f64 * 18.0))
            .collect();
        self.add(text(10.0, self.gauge_top + 28.0, "gauge sum"));
        for level in 0..=2 {
            let y = base - level as f64 * 18.0;
            self.add(text(LEFT - 14.0, y + 4.0, &level.to_string()).set("font-size", 10));
            self.add(
                Line::new()
                    .set("x1", LEFT)
                    .set("x2", LEFT + WIDTH)
                    .set("y1", y)
                    .set("y2", y)
                    .set("stroke", "#eee"),
            );
        }
        if !points.is_empty() {
            self.add(
                Polyline::new()
                    .set("points", points.join(" "))
                    .set("fill", "none")
                    .set("stroke", "#333")
                    .set("stroke-width", 1.5),
            );
        }
    }

    /// The pg_locks holder over time.
    fn lock_holder(&mut self, entries: &[Entry]) {
        self.add(text(10.0, self.locks_y + 14.0, "pg_locks holder"));
        for (s, e, h) in holder_segments(entries, self.end_ms) {
            let Some(h) = h else { continue };
            let i = self.replicas.iter().position(|r| *r == h).unwrap_or(0);
            let held = Rectangle::new()
                .set("x", self.x(s))
                .set("y", self.locks_y)
                .set("width", (self.x(e) - self.x(s)).max(1.0))
                .set("height", 20.0)
                .set("fill", PALETTE[i % PALETTE.len()])
                .set("fill-opacity", 0.7)
                .add(Title::new(format!("{h} holds the lock {s:.0}–{e:.0} ms")));
            self.add(held);
        }
    }
}

/// The pg_locks holder's segments: from, to, and the holder (`None`: no granted row).
fn holder_segments(entries: &[Entry], end_ms: f64) -> Vec<(f64, f64, Option<String>)> {
    let mut last: Option<(f64, Option<String>)> = None;
    let mut segs = Vec::new();
    for e in entries {
        let What::Locks { rows } = &e.what else {
            continue;
        };
        let holder = rows.iter().find(|r| r.1).map(|r| r.2.clone());
        if last.as_ref().is_some_and(|(_, h)| *h == holder) {
            continue;
        }
        if let Some((s, h)) = last.take() {
            segs.push((s, e.t_ms, h));
        }
        last = Some((e.t_ms, holder));
    }
    if let Some((s, h)) = last {
        segs.push((s, end_ms, h));
    }
    segs
}
