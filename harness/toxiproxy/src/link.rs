//! One direction of a proxied connection: data read from the source passes through the chain of
//! toxics of that stream, in order, before it is written to the destination.
//!
//! Upstream Toxiproxy runs each toxic of each link as a goroutine joined by channels and rewires
//! them under interrupts. Here a link is a plain state machine owned by the connection task:
//! every stage has an input queue, [`Link::advance`] moves items through the stages at a given
//! instant and says when it next needs to run, and [`Link::reconcile`] applies a new toxic set
//! to the live link (data held by a removed stage moves on to the next one; removing a `timeout`
//! closes the link, like upstream's cleanup). No task, lock or channel per stage, so no races.
//!
//! An applied `timeout` toxic drops data. What it does with the end of stream (the source's
//! close or read error) is the server's [`TimeoutMode`]:
//! - [`TimeoutMode::Upstream`] (upstream Toxiproxy since 2.1.4): it closes the link, so the
//!   destination is closed at once.
//! - [`TimeoutMode::Partition`] (upstream up to 2.1.3): it holds the end of stream, so the
//!   destination is not told, the way a peer across a partition never sees the other's FIN. The
//!   held end goes on only when the toxic is removed (which closes the link anyway), when its
//!   own timer fires (timeout > 0), when an update makes it not apply, or when the proxy closes
//!   this link's source itself because the other direction ended ([`Link::close_source`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::time::Instant;

use crate::toxic::{TimeoutMode, Toxic, ToxicKind};

/// The most bytes a link holds before it stops reading its source (back-pressure).
pub(crate) const MAX_BUFFERED: usize = 1 << 20;

/// An item flowing through a link: data, or the end of the stream.
#[derive(Debug)]
pub(crate) enum Item {
    /// A chunk, stamped with when it was read (or released by the last latency stage).
    Data {
        /// The bytes.
        data: Bytes,
        /// Reference time for latency.
        ts: Instant,
    },
    /// End of stream: the link closes once this reaches the destination.
    Eof,
}

impl Item {
    fn len(&self) -> usize {
        match self {
            Item::Data { data, .. } => data.len(),
            Item::Eof => 0,
        }
    }
}

/// What a stage did when polled.
enum Step {
    /// Passed an item on to the next stage.
    Emit(Item),
    /// Dropped an item.
    Consumed,
    /// Can do nothing more until the instant (or until something changes).
    Blocked(Option<Instant>),
    /// Closes: drops what it holds and sends end-of-stream on.
    Close,
    /// The whole connection must be reset (TCP RST).
    Reset,
}

/// One toxic of the chain, with its per-connection state.
#[derive(Debug)]
struct Stage {
    toxic: Arc<Toxic>,
    /// Whether the toxicity roll made this toxic apply (otherwise it passes data on).
    active: bool,
    buf: VecDeque<Item>,
    /// End of stream received (or stage closed): further input is dropped.
    input_closed: bool,
    closed: bool,
    /// When the head item (or its next piece) may leave.
    head_due: Option<Instant>,
    head_piece: usize,
    /// Set on update: the head item in progress leaves at once (upstream's interrupt).
    release_head: bool,
    /// slicer: the sizes of the pieces of the head chunk still to send, in order.
    slices: VecDeque<usize>,
    /// bandwidth: when the previous piece finished.
    next_free: Option<Instant>,
    /// timeout: start of the current wait.
    since: Instant,
    /// timeout: the end of stream arrived and is held (partition mode: not passed on while the
    /// toxic applies).
    eof_held: bool,
    /// reset_peer: when the reset fires.
    reset_at: Option<Instant>,
    /// slow_close: when the end of stream may leave.
    eof_due: Option<Instant>,
    /// limit_data: bytes passed (kept across updates, like upstream's toxic state).
    transmitted: u64,
    pending_close: bool,
}

fn ms(v: i64) -> Duration {
    Duration::from_millis(v.max(0) as u64)
}

impl Stage {
    fn new(toxic: Arc<Toxic>, now: Instant, rng: &mut fastrand::Rng) -> Self {
        let active = rng.f32() < toxic.toxicity;
        Self {
            toxic,
            active,
            buf: VecDeque::new(),
            input_closed: false,
            closed: false,
            head_due: None,
            head_piece: 0,
            slices: VecDeque::new(),
            release_head: false,
            next_free: None,
            since: now,
            eof_held: false,
            reset_at: None,
            eof_due: None,
            transmitted: 0,
            pending_close: false,
        }
    }

    /// Applies an updated toxic: like upstream's interrupt and re-run, the toxicity is rolled
    /// again, timers restart and a head item in progress is released.
    fn update(&mut self, toxic: Arc<Toxic>, now: Instant, rng: &mut fastrand::Rng) {
        self.active = rng.f32() < toxic.toxicity;
        let in_progress = match self.toxic.kind {
            ToxicKind::Latency { .. } | ToxicKind::Bandwidth { .. } => self.head_due.is_some(),
            // Pieces of the head chunk are left: upstream sends the rest of it at once.
            ToxicKind::Slicer { .. } => !self.slices.is_empty(),
            _ => false,
        };
        self.release_head = in_progress;
        self.slices.clear();
        self.toxic = toxic;
        self.head_due = None;
        self.next_free = None;
        self.since = now;
        self.eof_due = None;
        if self.eof_held && !self.active {
            // No longer applied: the held end of stream passes on, like upstream's noop re-run
            // reading the closed input.
            self.eof_held = false;
            self.buf.push_back(Item::Eof);
        }
    }

    fn pass(&mut self) -> Step {
        match self.buf.pop_front() {
            Some(item) => Step::Emit(item),
            None => Step::Blocked(None),
        }
    }

    /// `source_closed`: the proxy closed the link's source itself (see [`Link::close_source`]);
    /// `mode`: what an applied `timeout` does with the end of stream.
    fn poll(
        &mut self,
        now: Instant,
        rng: &mut fastrand::Rng,
        source_closed: bool,
        mode: TimeoutMode,
    ) -> Step {
        if self.closed {
            return match self.buf.pop_front() {
                Some(_) => Step::Consumed,
                None => Step::Blocked(None),
            };
        }
        if self.pending_close {
            return Step::Close;
        }
        if !self.active {
            return self.pass();
        }
        if self.release_head {
            self.release_head = false;
            self.head_due = None;
            if let Some(item) = self.buf.pop_front() {
                return Step::Emit(item);
            }
        }
        match self.toxic.kind {
            ToxicKind::Noop => self.pass(),
            ToxicKind::Latency { latency, jitter } => self.poll_latency(now, rng, latency, jitter),
            ToxicKind::Bandwidth { rate } => self.poll_bandwidth(now, rate),
            ToxicKind::Slicer {
                average_size,
                size_variation,
                delay,
            } => self.poll_slicer(now, rng, average_size, size_variation, delay),
            ToxicKind::Timeout { timeout } => self.poll_timeout(now, timeout, source_closed, mode),
            ToxicKind::ResetPeer { timeout } => match self.reset_at {
                Some(at) if now >= at => Step::Reset,
                Some(at) => Step::Blocked(Some(at)),
                // Any item, data or end of stream, arms the reset; the item is dropped.
                None => match self.buf.pop_front() {
                    Some(_) => {
                        self.reset_at = Some(now + ms(timeout));
                        Step::Consumed
                    }
                    None => Step::Blocked(None),
                },
            },
            ToxicKind::SlowClose { delay } => match self.buf.front() {
                Some(Item::Eof) => {
                    let due = *self.eof_due.get_or_insert(now + ms(delay));
                    if now >= due {
                        self.pass()
                    } else {
                        Step::Blocked(Some(due))
                    }
                }
                _ => self.pass(),
            },
            ToxicKind::LimitData { bytes } => match self.buf.pop_front() {
                None => Step::Blocked(None),
                Some(Item::Eof) => Step::Emit(Item::Eof),
                Some(Item::Data { mut data, ts }) => {
                    let remaining = (bytes - self.transmitted as i64).max(0) as usize;
                    data.truncate(remaining);
                    self.transmitted += data.len() as u64;
                    if bytes - self.transmitted as i64 <= 0 {
                        self.pending_close = true;
                    }
                    if data.is_empty() {
                        Step::Consumed
                    } else {
                        Step::Emit(Item::Data { data, ts })
                    }
                }
            },
        }
    }

    fn poll_latency(
        &mut self,
        now: Instant,
        rng: &mut fastrand::Rng,
        latency: i64,
        jitter: i64,
    ) -> Step {
        let ts = match self.buf.front() {
            None => return Step::Blocked(None),
            Some(Item::Eof) => return self.pass(),
            Some(Item::Data { ts, .. }) => *ts,
        };
        let due = *self.head_due.get_or_insert_with(|| {
            let offset = if jitter > 0 {
                rng.i64(0..jitter.saturating_mul(2)) - jitter
            } else {
                0
            };
            ts + ms(latency.saturating_add(offset))
        });
        if now < due {
            return Step::Blocked(Some(due));
        }
        self.head_due = None;
        match self.buf.pop_front() {
            Some(Item::Data { data, ts }) => Step::Emit(Item::Data {
                data,
                ts: ts.max(due),
            }),
            other => other.map_or(Step::Blocked(None), Step::Emit),
        }
    }

    fn poll_bandwidth(&mut self, now: Instant, rate: i64) -> Step {
        let len = match self.buf.front() {
            None => return Step::Blocked(None),
            Some(Item::Eof) => return self.pass(),
            // Rate 0 holds the data until the toxic changes or goes (a stall).
            Some(Item::Data { .. }) if rate <= 0 => return Step::Blocked(None),
            Some(Item::Data { data, .. }) => data.len(),
        };
        let rate = rate as u64;
        let due = match self.head_due {
            Some(due) => due,
            None => {
                // Pieces of at most 100 ms worth of data, like upstream.
                let piece = (len as u64).min(rate.saturating_mul(100)).max(1);
                let start = self.next_free.map_or(now, |f| f.max(now));
                let due = start + Duration::from_micros(piece.saturating_mul(1000) / rate);
                self.head_due = Some(due);
                self.head_piece = piece as usize;
                due
            }
        };
        if now < due {
            return Step::Blocked(Some(due));
        }
        self.head_due = None;
        self.next_free = Some(due);
        self.split_head(self.head_piece)
    }

    fn poll_slicer(
        &mut self,
        now: Instant,
        rng: &mut fastrand::Rng,
        average: i64,
        variation: i64,
        delay_us: i64,
    ) -> Step {
        let len = match self.buf.front() {
            None => return Step::Blocked(None),
            Some(item) => item.len(),
        };
        if let Some(due) = self.head_due {
            if now < due {
                return Step::Blocked(Some(due));
            }
        }
        // Like upstream, a delay follows every piece, the last one of a chunk included.
        self.head_due = (delay_us > 0).then(|| now + Duration::from_micros(delay_us as u64));
        if matches!(self.buf.front(), Some(Item::Eof)) {
            return self.pass();
        }
        if self.slices.is_empty() {
            self.slices = slice_plan(len, average, variation, rng);
        }
        let size = self.slices.pop_front().unwrap_or(len);
        self.split_head(size)
    }

    /// Emits the first `size` bytes of the head chunk (the whole chunk if it is not longer).
    fn split_head(&mut self, size: usize) -> Step {
        match self.buf.front_mut() {
            Some(Item::Data { data, ts }) if size < data.len() => Step::Emit(Item::Data {
                data: data.split_to(size),
                ts: *ts,
            }),
            _ => self.pass(),
        }
    }

    fn poll_timeout(
        &mut self,
        now: Instant,
        timeout: i64,
        source_closed: bool,
        mode: TimeoutMode,
    ) -> Step {
        if self.eof_held && source_closed {
            return Step::Close;
        }
        match self.buf.pop_front() {
            // Data is dropped; like upstream, each chunk restarts the timer.
            Some(Item::Data { .. }) => {
                self.since = now;
                Step::Consumed
            }
            // Upstream: the end of the input closes the link.
            Some(Item::Eof) if mode == TimeoutMode::Upstream => Step::Close,
            // Partition: the end of stream is held, the destination is not told.
            Some(Item::Eof) => {
                self.eof_held = true;
                Step::Consumed
            }
            None if timeout > 0 => {
                let deadline = self.since + ms(timeout);
                if now >= deadline {
                    Step::Close
                } else {
                    Step::Blocked(Some(deadline))
                }
            }
            None => Step::Blocked(None),
        }
    }
}

/// The sizes of the pieces a `slicer` cuts a chunk of `len` bytes into, in order: upstream's
/// `SlicerToxic.chunk`, which halves a piece (moving the cut by up to ± `variation`) until it
/// is at most `average + variation` long. Iterative, so a long chunk cannot exhaust the stack;
/// every piece has at least one byte (upstream recurses forever with `average` 0 and cuts out
/// of range when `variation` exceeds half a piece; here the cut is kept inside the piece).
fn slice_plan(
    len: usize,
    average: i64,
    variation: i64,
    rng: &mut fastrand::Rng,
) -> VecDeque<usize> {
    let mut pieces = VecDeque::new();
    let mut pending = vec![(0usize, len)];
    while let Some((start, end)) = pending.pop() {
        let size = end - start;
        if size <= 1 || (size as i64).saturating_sub(average) <= variation {
            pieces.push_back(size);
            continue;
        }
        let mut mid = (start + size / 2) as i64;
        if variation > 0 {
            mid += rng.i64(0..variation.saturating_mul(2)) - variation;
        }
        let mid = mid.clamp(start as i64 + 1, end as i64 - 1) as usize;
        // The left half is cut first: push it last.
        pending.push((mid, end));
        pending.push((start, mid));
    }
    pieces
}

/// A direction of a connection: the stages of its toxic chain and the output queue.
#[derive(Debug)]
pub(crate) struct Link {
    stages: Vec<Stage>,
    out: VecDeque<Item>,
    out_closed: bool,
    reset: bool,
    /// The proxy closed the source: an end of stream held by a `timeout` goes on.
    source_closed: bool,
    /// What an applied `timeout` does with the end of stream.
    timeout_mode: TimeoutMode,
}

fn push(queue: &mut VecDeque<Item>, closed: &mut bool, item: Item) {
    if *closed {
        return;
    }
    if matches!(item, Item::Eof) {
        *closed = true;
    }
    queue.push_back(item);
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Link {
    /// A link running the given chain, its `timeout` toxics in `timeout_mode`.
    pub(crate) fn new(
        chain: &[Arc<Toxic>],
        timeout_mode: TimeoutMode,
        now: Instant,
        rng: &mut fastrand::Rng,
    ) -> Self {
        Self {
            stages: chain
                .iter()
                .map(|t| Stage::new(t.clone(), now, rng))
                .collect(),
            out: VecDeque::new(),
            out_closed: false,
            reset: false,
            source_closed: false,
            timeout_mode,
        }
    }

    fn deliver(&mut self, index: usize, item: Item) {
        match self.stages.get_mut(index) {
            Some(stage) => push(&mut stage.buf, &mut stage.input_closed, item),
            None => push(&mut self.out, &mut self.out_closed, item),
        }
    }

    /// Feeds an item read from the source.
    pub(crate) fn push_input(&mut self, item: Item) {
        self.deliver(0, item);
    }

    /// Ends the input because the proxy closed the source itself (the other direction ended and
    /// its destination, this link's source, is closed for good): unlike an end of stream read
    /// from the source, this one is not held by a `timeout`, so the link ends once flushed.
    pub(crate) fn close_source(&mut self) {
        self.source_closed = true;
        self.deliver(0, Item::Eof);
    }

    /// Whether the source should be read: input still open and not too much held.
    pub(crate) fn wants_input(&self) -> bool {
        let closed = match self.stages.first() {
            Some(stage) => stage.input_closed,
            None => self.out_closed,
        };
        !closed && self.buffered() < MAX_BUFFERED
    }

    /// Bytes held in the stages and the output queue.
    pub(crate) fn buffered(&self) -> usize {
        self.stages
            .iter()
            .flat_map(|s| s.buf.iter())
            .chain(self.out.iter())
            .map(Item::len)
            .sum()
    }

    /// Whether a `reset_peer` toxic fired: the connection must be reset.
    pub(crate) fn reset_requested(&self) -> bool {
        self.reset
    }

    /// Moves items through the stages as far as they can go at `now`; returns when the link
    /// next needs to run (None: only when input, output or the toxics change).
    pub(crate) fn advance(&mut self, now: Instant, rng: &mut fastrand::Rng) -> Option<Instant> {
        let (source_closed, mode) = (self.source_closed, self.timeout_mode);
        loop {
            let mut progressed = false;
            let mut wake = None;
            for i in 0..self.stages.len() {
                loop {
                    match self.stages[i].poll(now, rng, source_closed, mode) {
                        Step::Emit(item) => {
                            self.deliver(i + 1, item);
                            progressed = true;
                        }
                        Step::Consumed => progressed = true,
                        Step::Blocked(at) => {
                            wake = earliest(wake, at);
                            break;
                        }
                        Step::Close => {
                            let stage = &mut self.stages[i];
                            stage.closed = true;
                            stage.input_closed = true;
                            stage.pending_close = false;
                            stage.buf.clear();
                            self.deliver(i + 1, Item::Eof);
                            progressed = true;
                        }
                        Step::Reset => {
                            self.reset = true;
                            return None;
                        }
                    }
                }
            }
            if !progressed {
                return wake;
            }
        }
    }

    /// The next bytes to write to the destination, if any.
    pub(crate) fn next_write(&self) -> Option<Bytes> {
        match self.out.front() {
            Some(Item::Data { data, .. }) => Some(data.clone()),
            _ => None,
        }
    }

    /// Records that `n` bytes of [`Link::next_write`] were written.
    pub(crate) fn wrote(&mut self, n: usize) {
        if let Some(Item::Data { data, .. }) = self.out.front_mut() {
            data.advance(n.min(data.len()));
            if data.is_empty() {
                self.out.pop_front();
            }
        }
        while matches!(self.out.front(), Some(Item::Data { data, .. }) if data.is_empty()) {
            self.out.pop_front();
        }
    }

    /// Whether the end of stream reached the destination (everything before it was written).
    pub(crate) fn output_ended(&self) -> bool {
        matches!(self.out.front(), Some(Item::Eof))
    }

    /// Applies a new chain for this direction to the live link.
    pub(crate) fn reconcile(
        &mut self,
        chain: &[Arc<Toxic>],
        now: Instant,
        rng: &mut fastrand::Rng,
    ) {
        let mut old: Vec<Option<Stage>> = std::mem::take(&mut self.stages)
            .into_iter()
            .map(Some)
            .collect();
        let kept = |s: &Stage| chain.iter().any(|t| t.id == s.toxic.id);
        // Walk backwards: the items of removed stages go, in order, to the end of the queue of
        // the next stage that stays (or of the output). A stage's queue holds newer items than
        // the queues after it, so appending keeps the stream in order.
        let mut carried: VecDeque<Item> = VecDeque::new();
        let mut target: Option<usize> = None;
        for i in (0..old.len()).rev() {
            let stays = old[i].as_ref().is_some_and(kept);
            if stays {
                self.flush_into(&mut old, target, &mut carried);
                target = Some(i);
                continue;
            }
            if let Some(mut stage) = old[i].take() {
                if stage.closed {
                    continue;
                }
                if matches!(stage.toxic.kind, ToxicKind::Timeout { .. }) {
                    // Upstream's timeout cleanup closes the link when the toxic is removed.
                    carried.push_back(Item::Eof);
                } else {
                    carried.extend(stage.buf.drain(..));
                }
            }
        }
        self.flush_into(&mut old, target, &mut carried);
        for toxic in chain {
            let existing = old
                .iter_mut()
                .find(|s| s.as_ref().is_some_and(|s| s.toxic.id == toxic.id))
                .and_then(Option::take);
            let stage = match existing {
                Some(mut stage) => {
                    if stage.toxic.generation != toxic.generation {
                        stage.update(toxic.clone(), now, rng);
                    }
                    stage
                }
                None => Stage::new(toxic.clone(), now, rng),
            };
            self.stages.push(stage);
        }
    }

    fn flush_into(
        &mut self,
        old: &mut [Option<Stage>],
        target: Option<usize>,
        carried: &mut VecDeque<Item>,
    ) {
        for item in carried.drain(..) {
            match target.and_then(|t| old[t].as_mut()) {
                Some(stage) => push(&mut stage.buf, &mut stage.input_closed, item),
                None => push(&mut self.out, &mut self.out_closed, item),
            }
        }
    }
}

#[cfg(test)]
mod tests;
