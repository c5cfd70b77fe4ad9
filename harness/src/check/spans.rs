//! Stretches of samples where a sampled condition was wrong (a disagreement, a missing row, a
//! sum of 2), for checks that allow a wrong stretch up to some length. A stretch ends only when
//! the condition has held again for [`SETTLED`] decided samples in a row, so that a condition
//! wrong every other sample (a flapping gauge) makes one long stretch, not many short ones: a
//! single right sample does not reset the tolerance. A stretch is what was seen: where the
//! samples stop for a while (the server was down and pg_locks could not be read), an open
//! stretch ends at the last sample before the gap ([`Stretches::sampled`]).

/// How many decided samples in a row must be right before a wrong stretch ends: three (the
/// first of them is where it ended). At the harness's sampling period of T/10, 0.2 to 0.3T of
/// agreement; a condition wrong one sample in four still resets, which the bound then judges
/// stretch by stretch.
pub const SETTLED: usize = 3;

/// The wrong stretches of one sampled condition.
#[derive(Debug, Default)]
pub struct Stretches {
    /// Where the open stretch began.
    since: Option<f64>,
    /// The first right sample since the open stretch's last wrong one, and how many right ones
    /// in a row.
    right: Option<(f64, usize)>,
    done: Vec<(f64, f64)>,
    /// The longest gap between two samples that still continues a stretch, if any.
    gap: Option<f64>,
    /// The last sample, wrong or right.
    last: Option<f64>,
}

impl Stretches {
    /// No stretch yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// No stretch yet, of samples taken every so often: a sample that comes more than
    /// `gap_ms` after the one before it first ends an open stretch at that one, since nothing
    /// was seen in between.
    pub fn sampled(gap_ms: f64) -> Self {
        Self {
            gap: Some(gap_ms),
            ..Self::default()
        }
    }

    /// Ends an open stretch at the last sample if `t_ms` comes more than the gap after it.
    fn seen(&mut self, t_ms: f64) {
        if let (Some(gap), Some(last)) = (self.gap, self.last) {
            if t_ms - last > gap {
                self.undecided(last);
            }
        }
        self.last = Some(self.last.map_or(t_ms, |l| l.max(t_ms)));
    }

    /// A sample where the condition was wrong, from `from_ms` on (a sample's own time, or
    /// earlier where the sample knows when it went wrong); an open stretch keeps its start.
    pub fn wrong(&mut self, from_ms: f64) {
        self.seen(from_ms);
        self.since.get_or_insert(from_ms);
        self.right = None;
    }

    /// A sample at `t_ms` where the condition held.
    pub fn right(&mut self, t_ms: f64) {
        self.seen(t_ms);
        let Some(since) = self.since else {
            return;
        };
        let (first, n) = self.right.map_or((t_ms, 1), |(f, n)| (f, n + 1));
        if n >= SETTLED {
            self.done.push((since, first));
            self.since = None;
            self.right = None;
        } else {
            self.right = Some((first, n));
        }
    }

    /// A sample that decides nothing (the condition could not be read): an open stretch ends
    /// at `last_decided_ms`, the last sample that did decide (or its first right sample since).
    /// Of [`Stretches::sampled`] stretches, one that comes more than the gap after the last
    /// decided sample ends there instead.
    pub fn undecided(&mut self, last_decided_ms: f64) {
        let end = match (self.gap, self.last) {
            (Some(gap), Some(last)) if last_decided_ms - last > gap => last,
            _ => last_decided_ms,
        };
        if let Some(since) = self.since.take() {
            let end = self.right.take().map_or(end, |(f, _)| f);
            self.done.push((since, end));
        }
    }

    /// Where the open stretch began, if one is open.
    pub fn open_since(&self) -> Option<f64> {
        self.since
    }

    /// Every stretch, an open one ending at `end_ms` (or at its first right sample since).
    pub fn finish(mut self, end_ms: f64) -> Vec<(f64, f64)> {
        self.undecided(end_ms);
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stretches(samples: &[(f64, bool)], end_ms: f64) -> Vec<(f64, f64)> {
        let mut s = Stretches::new();
        for &(t, ok) in samples {
            if ok {
                s.right(t);
            } else {
                s.wrong(t);
            }
        }
        s.finish(end_ms)
    }

    #[test]
    fn a_stretch_ends_at_the_first_of_three_right_samples() {
        let samples = [(0.0, true), (10.0, false), (20.0, false), (30.0, true)];
        let tail = [(40.0, true), (50.0, true), (60.0, false)];
        let all: Vec<_> = samples.iter().chain(&tail).copied().collect();
        assert_eq!(stretches(&all, 100.0), [(10.0, 30.0), (60.0, 100.0)]);
    }

    #[test]
    fn one_right_sample_does_not_reset_the_tolerance() {
        // Wrong every other sample for 200 ms: one stretch of 190 ms, not ten of 10 ms.
        let flapping: Vec<_> = (0..20).map(|k| (f64::from(k) * 10.0, k % 2 == 1)).collect();
        assert_eq!(stretches(&flapping, 200.0), [(0.0, 190.0)]);
        // Two right samples in a row do not either.
        let pairs: Vec<_> = (0..21).map(|k| (f64::from(k) * 10.0, k % 3 != 0)).collect();
        assert_eq!(stretches(&pairs, 210.0), [(0.0, 190.0)]);
    }

    #[test]
    fn an_undecided_sample_ends_a_stretch_at_the_last_decided_one() {
        let mut s = Stretches::new();
        s.wrong(10.0);
        s.wrong(20.0);
        s.undecided(20.0);
        s.wrong(50.0);
        s.right(60.0);
        s.undecided(70.0);
        assert_eq!(s.open_since(), None);
        assert_eq!(s.finish(100.0), [(10.0, 20.0), (50.0, 60.0)]);
    }

    #[test]
    fn a_gap_in_the_samples_ends_a_stretch_at_the_last_sample_before_it() {
        let mut s = Stretches::sampled(50.0);
        s.wrong(10.0);
        s.wrong(20.0);
        s.wrong(500.0);
        s.wrong(520.0);
        s.right(540.0);
        s.right(560.0);
        s.right(580.0);
        assert_eq!(s.finish(600.0), [(10.0, 20.0), (500.0, 540.0)]);
        // Without a gap, one stretch.
        let mut s = Stretches::new();
        s.wrong(10.0);
        s.wrong(500.0);
        assert_eq!(s.finish(600.0), [(10.0, 600.0)]);
    }

    #[test]
    fn an_open_stretch_keeps_its_start() {
        let mut s = Stretches::new();
        s.wrong(30.0);
        s.wrong(5.0);
        assert_eq!(s.open_since(), Some(30.0));
        assert_eq!(s.finish(40.0), [(30.0, 40.0)]);
    }
}
