//! LOOP-1 and X-FENCE from the `leader_work` table: every row written while its writer led
//! (allowing what a fault held in transit), and what became of the fencing replicas' late
//! writes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::*;

/// A row of the `leader_work` table, with its time on the run's clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkRow {
    /// The loop that wrote it.
    pub loop_name: String,
    /// The replica that wrote it.
    pub replica: String,
    /// The writer's term number.
    pub term: i64,
    /// When, in ms since the run's start.
    pub t_ms: f64,
    /// X-FENCE: the writer's term's token on a fenced row (the guarded twin of a fencing
    /// replica's pass), `None` on an unfenced one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<i64>,
}

impl WorkRow {
    /// Whether it is a gated step of a loop that runs on every replica (LOOP-3), not a pass of
    /// leader-only work: such a row is named `<loop>:<step>` ([`is_gated_step`]).
    pub fn is_gated_step(&self) -> bool {
        is_gated_step(&self.loop_name)
    }
}

/// Whether a `leader_work` row's loop name is a gated step's, `<loop>:<step>` (the harness's
/// own replica writes one for each step its gate lets through, LOOP-3), the one place that
/// reads that convention.
pub fn is_gated_step(loop_name: &str) -> bool {
    loop_name.contains(':')
}

/// When each term began: every `acquired`, by replica. (A leadership span can also begin at a
/// thaw, which resumes an old term and draws no token: [`leadership_spans`].)
fn grants(entries: &[Entry]) -> Vec<(&str, f64)> {
    (entries.iter())
        .filter_map(|e| match &e.what {
            What::Replica {
                replica,
                event: ReplicaEvent::Acquired { .. },
            } => Some((replica.as_str(), e.t_ms)),
            _ => None,
        })
        .collect()
}

/// Whether a term began after the term `row` was written in (its writer's last grant before
/// it landed) and more than `slack` before the row landed: a fence must have rejected such a
/// write.
fn newer_term_began(row: &WorkRow, grants: &[(&str, f64)], slack: f64) -> bool {
    let own = (grants.iter())
        .filter(|(r, a)| *r == row.replica && *a <= row.t_ms + slack)
        .map(|(_, a)| *a)
        .reduce(f64::max);
    let Some(own) = own else {
        return false;
    };
    (grants.iter()).any(|(_, a)| *a > own && *a + slack < row.t_ms)
}

/// X-FENCE: what became of the late writes of fencing replicas (those that wrote a fenced
/// row): each pass writes an unfenced row and its fenced twin in one statement, so a pass
/// that landed in a newer term shows as its unfenced row, and as its twin too unless the
/// fence rejected it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceTally {
    /// Unfenced rows of fencing replicas that landed after a newer term began.
    pub late_unfenced: usize,
    /// Fenced rows that landed after a newer term began: each a fence that did not hold.
    pub late_fenced: usize,
}

impl FenceTally {
    /// The passes whose fenced twin the fence rejected.
    pub fn rejected(&self) -> usize {
        self.late_unfenced.saturating_sub(self.late_fenced)
    }

    /// Counts `rows` against the terms on `entries`.
    pub fn of(entries: &[Entry], rows: &[WorkRow], b: &Bounds) -> FenceTally {
        let grants = grants(entries);
        let slack = ms_of(b.slack + b.sample);
        let fencing: BTreeSet<&str> = (rows.iter())
            .filter(|r| r.fence.is_some())
            .map(|r| r.replica.as_str())
            .collect();
        let late = (rows.iter())
            .filter(|r| fencing.contains(r.replica.as_str()) && !r.is_gated_step())
            .filter(|r| newer_term_began(r, &grants, slack));
        let mut tally = FenceTally::default();
        for row in late {
            match row.fence {
                Some(_) => tally.late_fenced += 1,
                None => tally.late_unfenced += 1,
            }
        }
        tally
    }
}

/// Whether `row` is a write its replica sent while it led but that was held in transit until
/// after its term: by a network fault on its link (partition, stall, latency), or by a pooler
/// while the server was down (PgBouncer keeps a client's query queued through a server stop or
/// restart and runs it once the server is back: chaos-119, a row 1.0 s after its term, sent
/// before a `stop-server` during the term). It reaches the server when the fault is lifted
/// (within the overlap bound after; a pooler's, when it lets go: [`pooler_lets_go`]). Nothing
/// in the spec fences such a write (X-FENCE would); the tick itself ran on the leader, so it
/// is counted apart, not against LOOP-1. Where the wire shows when the row's `INSERT` left
/// ([`sent_on_the_wire`]), that decides instead.
fn held_by_its_link(
    row: &WorkRow,
    spans: &BTreeMap<String, Vec<(f64, f64)>>,
    faults: &[crate::timeline::FaultSpan],
    b: &Bounds,
    pooled: bool,
) -> bool {
    let pad = ms_of(b.slack + b.sample);
    let Some(last_end) = (spans.get(&row.replica).into_iter().flatten())
        .filter(|(_, z)| *z <= row.t_ms)
        .map(|(_, z)| *z)
        .reduce(f64::max)
    else {
        return false;
    };
    faults.iter().any(|f| {
        let on_link = matches!(
            f.verb,
            Verb::Partition | Verb::PartitionRequests | Verb::Stall | Verb::Latency
        ) && f.target == row.replica;
        let server_down = pooled && is_outage(f);
        if !(on_link || server_down) || f.applied_ms > last_end + pad {
            return false;
        }
        let released = if server_down {
            pooler_lets_go(f, faults, pad)
        } else {
            f.lifted_ms
        };
        released.is_none_or(|l| row.t_ms <= l + ms_of(b.max_overlap()) + pad)
    })
}

/// Whether a write that left `replica` at `sent` (after its term) came from a leader thawed
/// after a freeze that began while it led, inside the overlap window the page allows it: it
/// left from just before the thaw (`pad`) to DEM-3's bound after it (`overlap`: "one
/// CheckInterval until the old leader's next check, one more for a SELECT 1 that never
/// answers, and one tick that was already running"), and before the replica showed on the
/// wire that it knew it had lost (its first lock call after the thaw: a standby's try).
/// Whether a thawed program's work timer or its check fires first is its scheduler's choice;
/// this judges the same on either order. Nothing in the spec fences such a write (X-FENCE
/// would), so it is counted apart, as a write its link held is.
fn held_by_its_freeze(
    replica: &str,
    sent: f64,
    faults: &[crate::timeline::FaultSpan],
    (pad, overlap): (f64, f64),
    conns: &[wire::model::Conn],
    led_at: &dyn Fn(&str, f64) -> bool,
) -> bool {
    // Its first lock call sent from `thaw` on.
    let standby_since = |thaw: f64| {
        (conns.iter().filter(|c| c.replica == replica))
            .flat_map(|c| c.statements.iter())
            .filter(|s| s.sent_ms >= thaw && s.asks())
            .map(|s| s.sent_ms)
            .reduce(f64::min)
    };
    faults.iter().any(|f| {
        let Some(thaw) = f.lifted_ms else {
            return false;
        };
        f.verb == Verb::Freeze
            && f.target == replica
            && led_at(replica, f.applied_ms)
            && sent >= thaw - pad
            && sent <= thaw + overlap + pad
            && standby_since(thaw).is_none_or(|s| sent < s)
    })
}

/// A server stop or restart: a pooler holds its clients' queries through it.
fn is_outage(f: &crate::timeline::FaultSpan) -> bool {
    matches!(f.verb, Verb::StopServer | Verb::RestartServer)
}

/// When a pooler lets go of a query it has held since the outage `first` began (`None`: not
/// within the run): it tries a server that was down again only after its login retry, and when
/// the server goes down again before that retry came round (chaos-119 on PostgreSQL 13: back
/// at 22.25 s, down again at 22.80 s), it holds the query through that outage too.
fn pooler_lets_go(
    first: &crate::timeline::FaultSpan,
    faults: &[crate::timeline::FaultSpan],
    pad: f64,
) -> Option<f64> {
    let retry = ms_of(crate::topology::POOLER_LOGIN_RETRY);
    let mut later: Vec<_> = (faults.iter())
        .filter(|g| is_outage(g) && g.applied_ms > first.applied_ms)
        .collect();
    later.sort_by(|x, y| x.applied_ms.total_cmp(&y.applied_ms));
    let mut until = first.lifted_ms? + retry;
    for g in later {
        if g.applied_ms <= until + pad {
            until = until.max(g.lifted_ms? + retry);
        }
    }
    Some(until)
}

/// When the `INSERT` that wrote `row` left its writer, as the writer's proxy read it: the
/// writer's last statement into `leader_work` sent before the row landed, carrying the row's
/// term (and its loop's name, as a value or in the text), and not answered before the row
/// landed (`pad`: the server clock's mapping error). `None` where the wire shows no such
/// statement (no journal: an upstream Toxiproxy).
fn sent_on_the_wire(row: &WorkRow, conns: &[wire::model::Conn], pad: f64) -> Option<f64> {
    use wire::sql::Arg;
    let (term, name) = (Arg::Int(row.term), Arg::Text(row.loop_name.clone()));
    let term_text = row.term.to_string();
    // The values as the SQL reading fills them in (an `INSERT ... VALUES`, its values sent as
    // parameters or written inline), else as sent as parameters (an `INSERT ... SELECT $1`).
    let carries = |s: &wire::model::Stmt| {
        let inline = (s.reading.as_ref())
            .is_ok_and(|r| r.values.contains(&term) && r.values.contains(&name));
        let param = |v: &str| s.params.iter().any(|p| p.as_deref() == Some(v));
        writes_work(s) && (inline || (param(&term_text) && param(&row.loop_name)))
    };
    (conns.iter().filter(|c| c.replica == row.replica))
        .flat_map(|c| c.statements.iter())
        .filter(|s| carries(s) && s.sent_ms <= row.t_ms + pad)
        .filter(|s| {
            s.answer
                .as_ref()
                .is_none_or(|(at, _)| *at + pad >= row.t_ms)
        })
        .map(|s| s.sent_ms)
        .reduce(f64::max)
}

/// Whether `s` is an `INSERT` into `leader_work`.
fn writes_work(s: &wire::model::Stmt) -> bool {
    (s.reading.as_ref()).is_ok_and(|r| r.inserts && r.tables.iter().any(|t| t == "leader_work"))
}

/// The statements into `leader_work` that wrote no row (answered with an error, or never),
/// each with its replica and when it left: leader-only passes, not an every-replica loop's
/// gated step (whose values name `<loop>:<step>`).
fn unlanded_inserts(conns: &[wire::model::Conn]) -> Vec<(&str, f64)> {
    (conns.iter())
        .flat_map(|c| c.statements.iter().map(move |s| (c.replica.as_str(), s)))
        .filter(|(_, s)| {
            writes_work(s) && !s.succeeded() && !s.params.iter().flatten().any(|p| is_gated_step(p))
        })
        .map(|(r, s)| (r, s.sent_ms))
        .collect()
}

/// A term reported by its `acquired` event began when the grant's answer reached the replica,
/// which its proxy saw: the event is read from the replica's output later, more than a report
/// lag under load (chaos seed 4: a grant answered at 7 660 ms, a row written at 7 806, the
/// `acquired` read at 7 910). Each span that an `acquired` opened starts instead at the grant
/// of the lock session the event names (its backend pid, on a connection the wire shows with
/// that pid), when that grant came before it.
fn granted_on_the_wire(
    spans: &mut BTreeMap<String, Vec<(f64, f64)>>,
    entries: &[Entry],
    model: &wire::model::WireModel,
) {
    let (conns, sessions) = (&model.conns, &model.sessions);
    for e in entries {
        let What::Replica {
            replica,
            event: ReplicaEvent::Acquired { backend_pid, .. },
        } = &e.what
        else {
            continue;
        };
        let grant = (sessions.iter())
            .filter(|l| &l.replica == replica && l.granted_ms <= e.t_ms)
            .filter(|l| conns[l.conn].pid == Some(*backend_pid))
            .map(|l| l.granted_ms)
            .reduce(f64::max);
        let (Some(g), Some(list)) = (grant, spans.get_mut(replica)) else {
            continue;
        };
        for span in list.iter_mut().filter(|s| s.0 == e.t_ms) {
            span.0 = g;
        }
    }
}

/// LOOP-1: leader-only rows come only from a replica that believed it led at the time (within
/// slack), and from the lock holder outside overlap windows. A write held by a fault on its
/// writer's link until after its term ([`held_by_its_link`]) is counted apart.
pub fn work_only_from_leader(
    entries: &[Entry],
    rows: &[WorkRow],
    end_ms: f64,
    b: &Bounds,
    pooled: &BTreeSet<String>,
) -> Check {
    let model = wire::model::WireModel::of(entries);
    work_only_from_leader_at(entries, &model, rows, end_ms, b, pooled, Level::Events)
}

/// [`work_only_from_leader`] for a program at `level`: below level 3 nobody reports when it
/// led, so each writer's spans are those its gauge showed ([`outside::gauge_spans`], widened
/// by one sampling period at their start). `model` is the wire of `entries`.
pub fn work_only_from_leader_at(
    entries: &[Entry],
    model: &wire::model::WireModel,
    rows: &[WorkRow],
    end_ms: f64,
    b: &Bounds,
    pooled: &BTreeSet<String>,
    level: Level,
) -> Check {
    let faults = fault_spans(entries);
    let conns = &model.conns;
    let spans = if level >= Level::Events {
        let mut spans = leadership_spans(entries, end_ms);
        acquired_before_a_freeze(&mut spans, &faults, history::report_lag_ms(b));
        granted_on_the_wire(&mut spans, entries, model);
        spans
    } else {
        outside::gauge_spans(entries, b)
    };
    let windows = overlaps(&spans);
    let slack = (b.slack + b.sample).as_secs_f64() * 1000.0;
    let grants = grants(entries);
    let near = |t: f64, (a, z): &(f64, f64)| t >= a - slack && t <= z + slack;
    let led_at = |replica: &str, t: f64| {
        (spans.get(replica)).is_some_and(|s| s.iter().any(|span| near(t, span)))
    };
    let in_overlap = |t: f64| windows.iter().any(|w| near(t, w));
    let (mut bad, mut held) = (Vec::new(), 0usize);
    for row in rows.iter().filter(|r| !r.is_gated_step()) {
        // A fenced row is the fence's claim: it lands only while no newer term has begun.
        if let Some(fence) = row.fence {
            if newer_term_began(row, &grants, slack) {
                bad.push(format!(
                    "{} by {} (term {}, fence {fence}) at {:.0} ms, after a newer term began",
                    row.loop_name, row.replica, row.term, row.t_ms
                ));
            }
            continue;
        }
        if led_at(&row.replica, row.t_ms) || in_overlap(row.t_ms) {
            continue;
        }
        // A row that landed outside its writer's terms: held in transit if its INSERT left the
        // writer while it led (the wire says when; without a journal, a fault that could
        // have held it must be on its link or, behind a pooler, the server's).
        let sent = sent_on_the_wire(row, conns, slack);
        let held_in_transit = match sent {
            Some(sent) => {
                led_at(&row.replica, sent)
                    || held_by_its_freeze(
                        &row.replica,
                        sent,
                        &faults,
                        (slack, ms_of(b.max_overlap())),
                        conns,
                        &led_at,
                    )
            }
            None => held_by_its_link(row, &spans, &faults, b, pooled.contains(&row.replica)),
        };
        if held_in_transit {
            held += 1;
        } else {
            let sent = sent
                .map(|s| format!(", sent at {s:.0} ms"))
                .unwrap_or_default();
            bad.push(format!(
                "{} by {} (term {}) at {:.0} ms{sent}",
                row.loop_name, row.replica, row.term, row.t_ms
            ));
        }
    }
    // A write a non-leader sent is the violation, whether or not it landed: the wire shows
    // those that never did (refused, or given up on behind a fault).
    for (replica, sent) in unlanded_inserts(conns) {
        if !led_at(replica, sent) && !in_overlap(sent) {
            bad.push(format!(
                "an INSERT into leader_work by {replica} sent at {sent:.0} ms, outside its terms \
                 (it never landed)"
            ));
        }
    }
    let writers: BTreeSet<&str> = rows.iter().map(|r| r.replica.as_str()).collect();
    let verdict = verdict_of(rows.len(), bad.is_empty());
    let message = if bad.is_empty() {
        format!(
            "{} rows from {:?}, each written while its replica led ({held} of them sent while \
             it led and held in transit until after its term: unfenced, X-FENCE)",
            rows.len(),
            writers
        )
    } else {
        format!(
            "{} rows outside their writer's terms, first: {}",
            bad.len(),
            bad[0]
        )
    };
    let mut check = Check::new("leader-only work", &["LOOP-1"], verdict, message);
    if rows.iter().any(|r| r.fence.is_some()) {
        let tally = FenceTally::of(entries, rows, b);
        check = check.figure(
            "fenced writes rejected (X-FENCE)",
            tally.rejected().to_string(),
        );
    }
    check
        .figure("rows", rows.len().to_string())
        .figure("late writes held in transit (unfenced)", held.to_string())
        .with_measures(count_at_most(
            "rows outside their writer's terms",
            rows.len(),
            bad.len(),
            0,
        ))
}

#[cfg(test)]
mod tests;
