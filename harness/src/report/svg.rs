//! One SVG timeline per scenario: a lane per replica with its terms, fault spans shaded, the
//! gauge sum and the pg_locks holder over time.

use std::time::Duration;

use svg::node::element::{Line, Polyline, Rectangle, Text, Title};
use svg::Document;

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
    let x = |ms: f64| LEFT + ms / end_ms * WIDTH;
    let lanes = replicas.len() as f64;
    let gauge_top = 40.0 + lanes * LANE + 20.0;
    let locks_y = gauge_top + 70.0;
    let height = locks_y + 60.0;
    let mut doc = Document::new()
        .set("viewBox", (0, 0, LEFT + WIDTH + 20.0, height))
        .set("width", LEFT + WIDTH + 20.0)
        .set("height", height)
        .add(
            Rectangle::new()
                .set("width", "100%")
                .set("height", "100%")
                .set("fill", "white"),
        )
        .add(
            text(
                10.0,
                20.0,
                &format!(
                    "{title} — T = {} ms, {:.1} s",
                    t.as_millis(),
                    end_ms / 1000.0
                ),
            )
            .set("font-size", 14),
        );

    // Grid lines every T (every 5 T when there are many).
    let t_ms = t.as_secs_f64() * 1000.0;
    let step = if end_ms / t_ms > 60.0 {
        5.0 * t_ms
    } else {
        t_ms
    };
    let mut k = 0.0;
    while k <= end_ms {
        doc = doc.add(
            Line::new()
                .set("x1", x(k))
                .set("x2", x(k))
                .set("y1", 30.0)
                .set("y2", locks_y + 20.0)
                .set("stroke", "#eee"),
        );
        k += step;
    }

    // Fault spans, shaded over all lanes.
    let faults: Vec<(f64, f64, String)> = fault_spans(entries)
        .into_iter()
        .map(|f| {
            let end = f.lifted_ms.unwrap_or(end_ms);
            (f.applied_ms, end, format!("{} {}", f.verb, f.target))
        })
        .collect();
    for (s, e, label) in &faults {
        let w = (x(*e) - x(*s)).max(2.0);
        doc = doc
            .add(
                Rectangle::new()
                    .set("x", x(*s))
                    .set("y", 30.0)
                    .set("width", w)
                    .set("height", lanes * LANE + 10.0)
                    .set("fill", "#d62728")
                    .set("fill-opacity", 0.12)
                    .add(Title::new(label.as_str())),
            )
            .add(
                text(x(*s) + 2.0, 40.0 + lanes * LANE + 12.0, label)
                    .set("fill", "#d62728")
                    .set("font-size", 10),
            );
    }

    // A lane per replica: its terms.
    let spans = leadership_spans(entries, end_ms);
    for (i, r) in replicas.iter().enumerate() {
        let y = 40.0 + i as f64 * LANE;
        doc = doc.add(text(10.0, y + 16.0, r)).add(
            Line::new()
                .set("x1", LEFT)
                .set("x2", LEFT + WIDTH)
                .set("y1", y + 12.0)
                .set("y2", y + 12.0)
                .set("stroke", "#ccc"),
        );
        for (s, e) in spans.get(r).into_iter().flatten() {
            doc = doc.add(
                Rectangle::new()
                    .set("x", x(*s))
                    .set("y", y + 2.0)
                    .set("width", (x(*e) - x(*s)).max(1.0))
                    .set("height", 20.0)
                    .set("fill", PALETTE[i % PALETTE.len()])
                    .add(Title::new(format!("{r} leads {:.0}–{:.0} ms", s, e))),
            );
        }
    }

    // The gauge sum over time.
    let mut points = Vec::new();
    for e in entries {
        if let What::Gauges { values } = &e.what {
            let sum: i64 = values.values().flatten().sum();
            points.push(format!(
                "{:.1},{:.1}",
                x(e.t_ms),
                gauge_top + 40.0 - sum as f64 * 18.0
            ));
        }
    }
    doc = doc.add(text(10.0, gauge_top + 28.0, "gauge sum"));
    for level in 0..=2 {
        let y = gauge_top + 40.0 - level as f64 * 18.0;
        doc = doc
            .add(text(LEFT - 14.0, y + 4.0, &level.to_string()).set("font-size", 10))
            .add(
                Line::new()
                    .set("x1", LEFT)
                    .set("x2", LEFT + WIDTH)
                    .set("y1", y)
                    .set("y2", y)
                    .set("stroke", "#eee"),
            );
    }
    if !points.is_empty() {
        doc = doc.add(
            Polyline::new()
                .set("points", points.join(" "))
                .set("fill", "none")
                .set("stroke", "#333")
                .set("stroke-width", 1.5),
        );
    }

    // The pg_locks holder over time.
    doc = doc.add(text(10.0, locks_y + 14.0, "pg_locks holder"));
    let mut last: Option<(f64, Option<String>)> = None;
    let mut segs = Vec::new();
    for e in entries {
        if let What::Locks { rows } = &e.what {
            let holder = rows.iter().find(|r| r.1).map(|r| r.2.clone());
            match &last {
                Some((_, h)) if *h == holder => {}
                _ => {
                    if let Some((s, h)) = last.take() {
                        segs.push((s, e.t_ms, h));
                    }
                    last = Some((e.t_ms, holder));
                }
            }
        }
    }
    if let Some((s, h)) = last {
        segs.push((s, end_ms, h));
    }
    for (s, e, h) in segs {
        let Some(h) = h else { continue };
        let i = replicas.iter().position(|r| *r == h).unwrap_or(0);
        doc = doc.add(
            Rectangle::new()
                .set("x", x(s))
                .set("y", locks_y)
                .set("width", (x(e) - x(s)).max(1.0))
                .set("height", 20.0)
                .set("fill", PALETTE[i % PALETTE.len()])
                .set("fill-opacity", 0.7)
                .add(Title::new(format!(
                    "{h} holds the lock {:.0}–{:.0} ms",
                    s, e
                ))),
        );
    }
    doc.to_string()
}
