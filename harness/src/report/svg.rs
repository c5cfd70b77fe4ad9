//! One SVG timeline per scenario: a lane per replica with its terms and the events that end
//! them (demoted, released, abandoned), fault spans shaded, the gauge sum and the pg_locks
//! holder over time with the moments the server released the lock, each checked bound as a
//! window (held or broken), and a time axis in units of T.

use std::time::Duration;

use svg::node::element::{Line, Polygon, Polyline, Rectangle, Text, Title};
use svg::{Document, Node as _};

use crate::check::{leadership_spans, Check, Measure, Verdict, Window, WorkRow, Worse};
use crate::event::ReplicaEvent;
use crate::timeline::{fault_spans, Entry, What};

const LANE: f64 = 28.0;
const LEFT: f64 = 130.0;
const WIDTH: f64 = 1000.0;
/// The height of one bound window's row.
const BOUND_ROW: f64 = 18.0;
/// The least room between two labelled grid lines of the axis, in pixels.
const AXIS_GAP: f64 = 36.0;
/// The least room between two event labels on one row, in pixels (closer ones keep only their
/// mark and its tooltip).
const LABEL_GAP: f64 = 56.0;
const PALETTE: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948",
];
const HELD: &str = "#2ca02c";
const BROKEN: &str = "#d62728";

fn text(x: f64, y: f64, s: &str) -> Text {
    Text::new(s)
        .set("x", x)
        .set("y", y)
        .set("font-family", "sans-serif")
        .set("font-size", 12)
}

fn line(x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str) -> Line {
    Line::new()
        .set("x1", x1)
        .set("y1", y1)
        .set("x2", x2)
        .set("y2", y2)
        .set("stroke", stroke)
}

/// What a run's picture draws (and its evidence folder keeps besides the replicas' logs).
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// The scenario's name (the picture's title).
    pub scenario: &'a str,
    /// The whole timeline.
    pub entries: &'a [Entry],
    /// The replicas, one lane each in the picture.
    pub replicas: &'a [String],
    /// T (the picture's grid and axis).
    pub t: Duration,
    /// The checks (the picture draws the bounds they placed on the timeline).
    pub checks: &'a [Check],
    /// The `leader_work` rows.
    pub rows: &'a [WorkRow],
}

/// Renders the timeline of one run: its entries, one lane per replica in `run.replicas`' order,
/// and a window for each bound its checks placed on the timeline.
pub fn render(run: &Record) -> String {
    let end_ms = run.entries.last().map_or(1.0, |e| e.t_ms).max(1.0);
    let windows = windows(run.checks);
    let lanes = run.replicas.len() as f64;
    let gauge_top = 40.0 + lanes * LANE + 20.0;
    let locks_y = gauge_top + 70.0;
    let bounds_y = locks_y + 40.0;
    let mut c = Canvas {
        doc: Document::new(),
        end_ms,
        lanes,
        gauge_top,
        locks_y,
        bounds_y,
        axis_y: bounds_y + windows.len() as f64 * BOUND_ROW + 12.0,
        replicas: run.replicas,
    };
    c.header(run.scenario, run.t);
    c.grid(run.t);
    c.faults(run.entries);
    c.terms(run.entries);
    c.events(run.entries);
    c.gauge_sum(run.entries);
    c.lock_holder(run.entries);
    c.bounds(&windows);
    c.axis(run.t);
    c.doc.to_string()
}

/// The bounds the checks placed on the timeline, with their checks' verdicts.
fn windows(checks: &[crate::check::Check]) -> Vec<(Verdict, &Measure, Window)> {
    (checks.iter())
        .filter(|c| c.verdict != Verdict::Unknown)
        .flat_map(|c| c.measures.iter().map(move |m| (c.verdict, m)))
        .filter_map(|(v, m)| m.window.map(|w| (v, m, w)))
        .collect()
}

/// The picture as it is drawn, layer by layer, and its geometry.
struct Canvas<'a> {
    doc: Document,
    end_ms: f64,
    lanes: f64,
    gauge_top: f64,
    locks_y: f64,
    bounds_y: f64,
    axis_y: f64,
    replicas: &'a [String],
}

impl Canvas<'_> {
    /// The x coordinate of `ms` since the start, kept on the picture.
    fn x(&self, ms: f64) -> f64 {
        LEFT + (ms / self.end_ms).clamp(0.0, 1.0) * WIDTH
    }

    fn add(&mut self, node: impl svg::Node) {
        self.doc.append(node);
    }

    fn header(&mut self, title: &str, t: Duration) {
        let height = self.axis_y + 34.0;
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

    /// A faint line every T (when T is wider than a few pixels), a darker one at each labelled
    /// step of the axis.
    fn grid(&mut self, t: Duration) {
        let t_ms = t.as_secs_f64() * 1000.0;
        let step = axis_step(t_ms, self.end_ms);
        let every_t = t_ms / self.end_ms * WIDTH >= 5.0;
        let mut k = 0u32;
        while f64::from(k) * t_ms <= self.end_ms {
            let x = self.x(f64::from(k) * t_ms);
            if k % step == 0 {
                self.add(line(x, 30.0, x, self.axis_y, "#ddd"));
            } else if every_t {
                self.add(line(x, 30.0, x, self.axis_y, "#f3f3f3"));
            }
            k += 1;
        }
    }

    /// The time axis under the picture: `0T`, `1T`, … at each labelled step.
    fn axis(&mut self, t: Duration) {
        let t_ms = t.as_secs_f64() * 1000.0;
        let step = axis_step(t_ms, self.end_ms);
        let y = self.axis_y;
        self.add(line(LEFT, y, LEFT + WIDTH, y, "#888"));
        let caption = format!("time (T = {} ms)", t.as_millis());
        self.add(text(10.0, y + 14.0, &caption).set("font-size", 11));
        let mut k = 0u32;
        while f64::from(k) * t_ms <= self.end_ms {
            let x = self.x(f64::from(k) * t_ms);
            self.add(line(x, y, x, y + 4.0, "#888"));
            let label = text(x, y + 16.0, &format!("{k}T"))
                .set("font-size", 10)
                .set("text-anchor", "middle")
                .set("class", "axis");
            self.add(label);
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
            let y = lane_y(i);
            self.add(text(10.0, y + 16.0, r));
            self.add(line(LEFT, y + 12.0, LEFT + WIDTH, y + 12.0, "#ccc"));
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

    /// A mark on its replica's lane for each demotion, release and abandonment.
    fn events(&mut self, entries: &[Entry]) {
        let mut last_label = vec![f64::NEG_INFINITY; self.replicas.len()];
        for e in entries {
            let What::Replica { replica, event } = &e.what else {
                continue;
            };
            let Some(kind) = EventMark::of(event) else {
                continue;
            };
            let Some(i) = self.replicas.iter().position(|r| r == replica) else {
                continue;
            };
            let (x, y) = (self.x(e.t_ms), lane_y(i));
            let tip = format!("{replica} {} at {:.0} ms", kind.name(), e.t_ms);
            let labelled = x - last_label[i] >= LABEL_GAP;
            if labelled {
                last_label[i] = x;
            }
            self.mark(kind, x, y, &tip, labelled);
        }
    }

    /// One event's mark: a glyph over a line across the lane at `(x, y)`, and its name.
    fn mark(&mut self, kind: EventMark, x: f64, y: f64, tip: &str, labelled: bool) {
        let color = kind.color();
        self.add(line(x, y, x, y + 24.0, color).set("stroke-width", 2));
        let glyph = Polygon::new()
            .set("points", kind.glyph(x, y + 1.0))
            .set("fill", color)
            .set("class", format!("event {}", kind.class()))
            .add(Title::new(tip));
        self.add(glyph);
        if labelled {
            // Near the right edge the name goes to the mark's left.
            let label = if x > LEFT + WIDTH - LABEL_GAP {
                text(x - 6.0, y + 9.0, kind.name()).set("text-anchor", "end")
            } else {
                text(x + 5.0, y + 9.0, kind.name())
            };
            self.add(label.set("font-size", 9).set("fill", color));
        }
    }

    /// The gauge sum over time.
    fn gauge_sum(&mut self, entries: &[Entry]) {
        let base = self.gauge_top + 40.0;
        let points: Vec<String> = (entries.iter())
            .filter_map(|e| match &e.what {
                What::Gauges { values, .. } => {
                    Some((e.t_ms, values.values().flatten().sum::<i64>()))
                }
                _ => None,
            })
            .map(|(t_ms, sum)| format!("{:.1},{:.1}", self.x(t_ms), base - sum as f64 * 18.0))
            .collect();
        self.add(text(10.0, self.gauge_top + 28.0, "gauge sum"));
        for level in 0..=2 {
            let y = base - level as f64 * 18.0;
            self.add(text(LEFT - 14.0, y + 4.0, &level.to_string()).set("font-size", 10));
            self.add(line(LEFT, y, LEFT + WIDTH, y, "#eee"));
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

    /// The pg_locks holder over time, and a mark where each holder's row went away.
    fn lock_holder(&mut self, entries: &[Entry]) {
        self.add(text(10.0, self.locks_y + 14.0, "pg_locks holder"));
        let segments = holder_segments(entries, self.end_ms);
        for (s, e, h) in &segments {
            let Some(h) = h else { continue };
            let i = self.replicas.iter().position(|r| r == h).unwrap_or(0);
            let held = Rectangle::new()
                .set("x", self.x(*s))
                .set("y", self.locks_y)
                .set("width", (self.x(*e) - self.x(*s)).max(1.0))
                .set("height", 20.0)
                .set("fill", PALETTE[i % PALETTE.len()])
                .set("fill-opacity", 0.7)
                .add(Title::new(format!("{h} holds the lock {s:.0}–{e:.0} ms")));
            self.add(held);
        }
        let mut last_label = f64::NEG_INFINITY;
        for (end_ms, holder) in lock_releases(&segments) {
            let x = self.x(end_ms);
            let tip = format!("the server no longer shows {holder}'s lock at {end_ms:.0} ms");
            let labelled = x - last_label >= LABEL_GAP;
            if labelled {
                last_label = x;
            }
            let y = self.locks_y - 2.0;
            self.mark(EventMark::LockReleased, x, y, &tip, labelled);
        }
    }

    /// Each bound a check placed on the timeline: a window from the moment it is measured from
    /// to the bound's edge, outlined green when it held, red and dashed when broken, with a
    /// tick where the measured event landed and the figure beside it. An upper bound's window
    /// (`≤`: the event must land inside) is filled in the outline's colour, a lower bound's
    /// (`≥`: it must land after) in grey.
    fn bounds(&mut self, windows: &[(Verdict, &Measure, Window)]) {
        if !windows.is_empty() {
            self.add(text(10.0, self.bounds_y + 12.0, "checked bounds"));
        }
        for (i, (verdict, m, w)) in windows.iter().enumerate() {
            let y = self.bounds_y + i as f64 * BOUND_ROW;
            let held = m.held() && *verdict == Verdict::Valid;
            self.bound_window(m, w, y, held);
        }
    }

    fn bound_window(&mut self, m: &Measure, w: &Window, y: f64, held: bool) {
        let (color, class) = if held {
            (HELD, "bound held")
        } else {
            (BROKEN, "bound broken")
        };
        let (x0, x1) = (self.x(w.from_ms), self.x(w.bound_ms));
        let mut rect = Rectangle::new()
            .set("x", x0)
            .set("y", y + 2.0)
            .set("width", (x1 - x0).max(1.0))
            .set("height", BOUND_ROW - 4.0)
            .set(
                "fill",
                if m.worse == Worse::Below {
                    "#888"
                } else {
                    color
                },
            )
            .set("fill-opacity", if held { 0.15 } else { 0.3 })
            .set("stroke", color)
            .set("class", class)
            .add(Title::new(m.to_string()));
        if !held {
            rect = rect.set("stroke-dasharray", "4 2").set("stroke-width", 1.5);
        }
        self.add(rect);
        self.add(line(x1, y, x1, y + BOUND_ROW, color).set("stroke-width", 2));
        let at = w.at_ms.map(|a| self.x(a));
        if let Some(xa) = at {
            self.add(line(xa, y + 1.0, xa, y + BOUND_ROW - 1.0, "#222").set("stroke-width", 2));
        }
        let verdict = if held { "held" } else { "BROKEN" };
        let label = format!("{m}: {verdict}");
        let (left, right) = (x0.min(at.unwrap_or(x0)), x1.max(at.unwrap_or(x1)));
        let caption = caption_at(left, right, y + 13.0, &label);
        self.add(caption.set("font-size", 10).set("fill", color));
    }
}

/// A window's caption: after its right end if it fits in the picture, else before its left
/// end, else inside the window from its left end.
fn caption_at(left: f64, right: f64, y: f64, label: &str) -> Text {
    // About 5.6 px a character at 10 px sans-serif.
    let width = label.chars().count() as f64 * 5.6;
    if right + 5.0 + width <= LEFT + WIDTH + 15.0 {
        text(right + 5.0, y, label)
    } else if left - 5.0 - width >= 5.0 {
        text(left - 5.0, y, label).set("text-anchor", "end")
    } else {
        text(left + 4.0, y, label)
    }
}

/// The top of replica `i`'s lane.
fn lane_y(i: usize) -> f64 {
    40.0 + i as f64 * LANE
}

/// How many T between two labelled grid lines: the smallest of 1, 2, 5, 10, 20, … that leaves
/// [`AXIS_GAP`] pixels between labels.
fn axis_step(t_ms: f64, end_ms: f64) -> u32 {
    let px_per_t = t_ms / end_ms * WIDTH;
    [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
        .into_iter()
        .find(|s| f64::from(*s) * px_per_t >= AXIS_GAP)
        .unwrap_or(1000)
}

/// The events the picture marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventMark {
    Demoted,
    Released,
    Abandoned,
    /// The server's pg_locks no longer shows the holder's row.
    LockReleased,
}

impl EventMark {
    fn of(event: &ReplicaEvent) -> Option<Self> {
        match event {
            ReplicaEvent::Demoted { .. } => Some(Self::Demoted),
            ReplicaEvent::Released { .. } => Some(Self::Released),
            ReplicaEvent::Abandoned { .. } => Some(Self::Abandoned),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Demoted => "demoted",
            Self::Released => "released",
            Self::Abandoned => "abandoned",
            Self::LockReleased => "lock released",
        }
    }

    fn class(self) -> &'static str {
        match self {
            Self::Demoted => "demoted",
            Self::Released => "released",
            Self::Abandoned => "abandoned",
            Self::LockReleased => "lock-released",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Self::Demoted => "#d62728",
            Self::Released => "#2c7a2c",
            Self::Abandoned => "#111",
            Self::LockReleased => "#6a3d9a",
        }
    }

    /// The glyph's points around `(x, y)`: a triangle pointing down (demoted), a square
    /// (released), a cross (abandoned), a diamond (lock released).
    fn glyph(self, x: f64, y: f64) -> String {
        let pts: &[(f64, f64)] = match self {
            Self::Demoted => &[(-5.0, 0.0), (5.0, 0.0), (0.0, 7.0)],
            Self::Released => &[(-4.0, 0.0), (4.0, 0.0), (4.0, 8.0), (-4.0, 8.0)],
            Self::Abandoned => &[
                (-4.0, 0.0),
                (0.0, 3.0),
                (4.0, 0.0),
                (1.5, 4.0),
                (4.0, 8.0),
                (0.0, 5.0),
                (-4.0, 8.0),
                (-1.5, 4.0),
            ],
            Self::LockReleased => &[(0.0, -1.0), (4.0, 3.0), (0.0, 7.0), (-4.0, 3.0)],
        };
        let pts: Vec<String> = (pts.iter())
            .map(|(dx, dy)| format!("{:.1},{:.1}", x + dx, y + dy))
            .collect();
        pts.join(" ")
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

/// Where a holder's row went away (the first sample without it), and whose it was; a holder
/// still in place when the run ended released nothing.
fn lock_releases(segments: &[(f64, f64, Option<String>)]) -> Vec<(f64, &str)> {
    segments
        .windows(2)
        .filter_map(|w| w[0].2.as_deref().map(|h| (w[0].1, h)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::ev;
    use crate::check::{Check, Unit};
    use crate::fault::Verb;

    fn locks(t_ms: f64, holder: Option<&str>) -> Entry {
        let rows = holder.map_or(vec![], |h| vec![(7, true, h.to_owned())]);
        Entry {
            t_ms,
            what: What::Locks { rows },
        }
    }

    /// r1 leads, is cut off at 200 ms, demotes at 572 ms (1.86T); the server drops its row by
    /// 900 ms; r2 leads from 1000 ms and releases at 1900 ms (its row still shows at 2000 ms);
    /// the run ends at 2000 ms (10T at T = 200 ms).
    fn timeline() -> Vec<Entry> {
        let acquired = |term| ReplicaEvent::Acquired {
            term,
            backend_pid: 1,
        };
        let fault = |t_ms, lifted| Entry {
            t_ms,
            what: What::Fault {
                verb: Verb::Partition,
                target: "r1".into(),
                lifted,
            },
        };
        let released = ReplicaEvent::Released {
            term: 1,
            outcome: crate::event::ReleaseOutcome::Unlocked,
            reason: None,
        };
        vec![
            ev(0.0, "r1", acquired(1)),
            locks(10.0, Some("r1")),
            fault(200.0, false),
            ev(
                572.0,
                "r1",
                ReplicaEvent::Demoted {
                    term: 1,
                    error: "timeout".into(),
                },
            ),
            locks(880.0, Some("r1")),
            locks(900.0, None),
            ev(1000.0, "r2", acquired(1)),
            locks(1010.0, Some("r2")),
            fault(1600.0, true),
            ev(1900.0, "r2", released),
            locks(2000.0, Some("r2")),
        ]
    }

    /// A check of `what` measured `at_ms` from 200 ms against `bound` T.
    fn bound(what: &str, at_ms: f64, bound: f64, verdict: Verdict) -> Check {
        let m = Measure::at_most(what.into(), Some((at_ms - 200.0) / 200.0), bound, Unit::T)
            .with_window(Window {
                from_ms: 200.0,
                bound_ms: 200.0 + bound * 200.0,
                at_ms: Some(at_ms),
            });
        Check::new(what, &["DEM-2"], verdict, String::new()).measure(m)
    }

    fn picture(checks: &[Check]) -> String {
        let entries = timeline();
        render(&Record {
            scenario: "leader-partition",
            entries: &entries,
            replicas: &["r1".to_owned(), "r2".to_owned()],
            t: Duration::from_millis(200),
            checks,
            rows: &[],
        })
    }

    /// An element of the picture: its attributes and its text.
    struct Found {
        attrs: std::collections::BTreeMap<String, String>,
        text: String,
    }

    impl Found {
        fn attr(&self, name: &str) -> Option<String> {
            self.attrs.get(name).cloned()
        }
    }

    /// The elements of `svg` whose class is `class`.
    fn with_class(svg: &str, class: &str) -> Vec<Found> {
        let doc = roxmltree::Document::parse(svg).expect("the picture is well-formed XML");
        (doc.descendants())
            .filter(|n| n.attribute("class") == Some(class))
            .map(|n| Found {
                attrs: (n.attributes())
                    .map(|a| (a.name().to_owned(), a.value().to_owned()))
                    .collect(),
                text: n.text().unwrap_or_default().trim().to_owned(),
            })
            .collect()
    }

    #[test]
    fn the_axis_is_labelled_in_units_of_t() {
        let svg = picture(&[]);
        let labels: Vec<String> = (with_class(&svg, "axis").into_iter())
            .map(|f| f.text)
            .collect();
        let want: Vec<String> = (0..=10).map(|k| format!("{k}T")).collect();
        assert_eq!(labels, want);
        assert!(svg.contains("time (T = 200 ms)"), "{svg}");
        assert_eq!(axis_step(200.0, 60_000.0), 20, "300T across 1000 px");
    }

    #[test]
    fn demotions_and_the_servers_release_are_marked() {
        let svg = picture(&[]);
        let demoted = with_class(&svg, "event demoted");
        assert_eq!(demoted.len(), 1, "{svg}");
        assert_eq!(with_class(&svg, "event released").len(), 1, "{svg}");
        let abandoned = ReplicaEvent::Abandoned {
            term: 1,
            panicked: true,
        };
        assert_eq!(EventMark::of(&abandoned), Some(EventMark::Abandoned));
        let released = with_class(&svg, "event lock-released");
        assert_eq!(
            released.len(),
            1,
            "the row of r2 is still there at the end: {svg}"
        );
        assert!(
            svg.contains("the server no longer shows r1's lock at 900 ms"),
            "{svg}"
        );
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<&str> = (doc.descendants())
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(str::trim))
            .collect();
        assert!(
            texts.contains(&"demoted") && texts.contains(&"lock released"),
            "{texts:?}"
        );
    }

    #[test]
    fn a_broken_bound_is_drawn_unlike_a_held_one() {
        let checks = [
            bound("demoted after cut", 572.0, 2.0, Verdict::Valid),
            bound("lock_released after cut", 900.0, 3.0, Verdict::Invalid),
        ];
        let svg = picture(&checks);
        let held = with_class(&svg, "bound held");
        let broken = with_class(&svg, "bound broken");
        assert_eq!((held.len(), broken.len()), (1, 1), "{svg}");
        assert_eq!(held[0].attr("stroke").as_deref(), Some(HELD));
        assert_eq!(broken[0].attr("stroke").as_deref(), Some(BROKEN));
        assert_eq!(held[0].attr("stroke-dasharray"), None);
        assert!(broken[0].attr("stroke-dasharray").is_some());
        // The held window spans from the cut (200 ms = 1T) to its bound (600 ms = 3T).
        let x = |ms: f64| format!("{}", LEFT + ms / 2000.0 * WIDTH);
        assert_eq!(held[0].attr("x"), Some(x(200.0)));
        assert_eq!(
            held[0].attr("width"),
            Some(format!("{}", 400.0 / 2000.0 * WIDTH))
        );
        assert!(
            svg.contains("demoted after cut 1.86T, bound ≤ 2T: held"),
            "{svg}"
        );
        assert!(
            svg.contains("lock_released after cut 3.5T, bound ≤ 3T (broken): BROKEN"),
            "{svg}"
        );
        // An unknown check places no window.
        let unknown = [bound("x", 572.0, 2.0, Verdict::Unknown)];
        assert!(with_class(&picture(&unknown), "bound held").is_empty());
    }
}
