//! The values of command-line flags, and their limits, checked before anything starts.
//!
//! Every duration flag (`--t`, `--slack`, `--hold`, `--latency`, ...) is read by [`duration`],
//! humantime's syntax: `250ms`, `5s`, `1m`, `1.5s`, `1m 30s`. A bare number is an error that
//! says which units there are: `--t 5` could mean 5 ms or 5 s, and a guess either way is a
//! surprise.
//!
//! | flag | rule |
//! |---|---|
//! | `--t` (T) | between [`T_MIN`] and [`T_MAX`] |
//! | `--replicas` (`harness up`) | at most [`MAX_REPLICAS`] |
//! | `--hold` (`harness up`) | more than zero |
//! | `--slack` (`harness run`) | less than T |
//! | `--shard K/N` (`harness run`) | 1 ≤ K ≤ N |
//! | `--latency`, `--jitter` (`harness fault`) | a duration, or a multiple of T (`2T`) |

use std::time::Duration;

use crate::span::Span;

/// The smallest check interval T: a check must get its round trip to PostgreSQL (and, after a
/// lost connection, a new session) done well within T.
pub const T_MIN: Duration = Duration::from_millis(50);

/// The largest check interval T (production's default is 5 s).
pub const T_MAX: Duration = Duration::from_secs(600);

/// The most replicas `harness up` starts: each opens its pool (8 connections) and a lock
/// session, and PostgreSQL's default `max_connections` (100, 3 reserved) must leave room for
/// the harness's own observers.
pub const MAX_REPLICAS: usize = 10;

/// Parses a duration flag in humantime's syntax (`250ms`, `5s`, `1m`, `1.5s`, `1m 30s`).
///
/// # Errors
/// A bare number (no unit), or text humantime does not read; the message names the units.
pub fn duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "{text:?} has no unit: write {text}ms, {text}s or {text}m (a bare number is not \
             taken as any of them)"
        ));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}): write e.g. 250ms, 5s or 1m"))
}

/// Parses a check interval T: a [`duration`] within [`T_MIN`]..=[`T_MAX`].
///
/// # Errors
/// Not a duration, or out of range.
pub fn check_interval(text: &str) -> Result<Duration, String> {
    let t = duration(text)?;
    if t < T_MIN || t > T_MAX {
        return Err(format!(
            "T = {} is out of range: give {} to {}",
            humantime::format_duration(t),
            humantime::format_duration(T_MIN),
            humantime::format_duration(T_MAX)
        ));
    }
    Ok(t)
}

/// `--shard K/N`: the K-th of N shards of a suite run on several machines. The scenarios are
/// dealt out in turn, in the order of their file names: shard K runs the K-th, the (K+N)-th,
/// and so on, so that N shards run every scenario once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, from 1.
    pub index: usize,
    /// How many shards.
    pub count: usize,
}

impl Shard {
    /// Whether the shard runs the item at `position` (from 0) of the sorted list.
    pub fn holds(&self, position: usize) -> bool {
        position % self.count == self.index - 1
    }
}

/// Parses `--shard K/N`.
///
/// # Errors
/// Not two numbers with a slash, N zero, or K outside 1..=N.
pub fn shard(text: &str) -> Result<Shard, String> {
    let bad = || format!("{text:?}: write K/N, e.g. 2/3 for the second of three shards");
    let (k, n) = text.trim().split_once('/').ok_or_else(bad)?;
    let index: usize = k.trim().parse().map_err(|_| bad())?;
    let count: usize = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || index == 0 || index > count {
        return Err(format!(
            "{text:?}: shard {index} of {count} does not exist; K is 1 to N"
        ));
    }
    Ok(Shard { index, count })
}

/// Parses a positive [`duration`].
///
/// # Errors
/// Not a duration, or zero.
pub fn positive(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        d if d.is_zero() => Err(format!("{text:?}: give a duration above zero")),
        d => Ok(d),
    }
}

/// Parses a replica count: at most [`MAX_REPLICAS`].
///
/// # Errors
/// Not a number, or above the limit.
pub fn replicas(text: &str) -> Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of replicas"))?;
    if n > MAX_REPLICAS {
        return Err(format!(
            "{n} replicas: at most {MAX_REPLICAS} (each holds 9 PostgreSQL connections, and the \
             server allows 100)"
        ));
    }
    Ok(n)
}

/// Parses a span of a fault flag: a multiple of T (`2T`, `0.5T`) or a [`duration`].
///
/// # Errors
/// Neither.
pub fn span(text: &str) -> Result<Span, String> {
    if text.trim_end().ends_with('T') {
        return Span::parse(text);
    }
    duration(text).map(Span::Abs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--shard K/N` deals the items out in turn: N shards hold each item once; a shard that
    /// does not exist, or text that is not K/N, is refused saying how to write it.
    #[test]
    fn shards_deal_every_item_out_once() {
        let shards: Vec<Shard> = (1..=3).map(|k| shard(&format!("{k}/3")).unwrap()).collect();
        assert_eq!(
            (0..7)
                .map(|i| shards.iter().filter(|s| s.holds(i)).count())
                .collect::<Vec<_>>(),
            [1; 7]
        );
        let held: Vec<usize> = (0..7).filter(|i| shards[1].holds(*i)).collect();
        assert_eq!(held, [1, 4], "the second of three takes the 2nd and 5th");
        assert_eq!(shard(" 1/1 ").unwrap(), Shard { index: 1, count: 1 });
        for bad in ["0/3", "4/3", "1/0"] {
            let e = shard(bad).unwrap_err();
            assert!(e.ends_with("does not exist; K is 1 to N"), "{bad}: {e}");
        }
        for bad in ["2", "a/3", "1/3/2", ""] {
            let e = shard(bad).unwrap_err();
            assert!(e.contains("write K/N"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations_need_a_unit() {
        let ms = Duration::from_millis;
        assert_eq!(duration("250ms"), Ok(ms(250)));
        assert_eq!(duration("5s"), Ok(ms(5000)));
        assert_eq!(duration("1.5s"), Ok(ms(1500)));
        assert_eq!(duration("1m"), Ok(ms(60_000)));
        assert_eq!(duration("1m 30s"), Ok(ms(90_000)));
        let bare = duration("5").unwrap_err();
        assert!(bare.contains("has no unit: write 5ms, 5s or 5m"), "{bare}");
        assert!(duration("soon").unwrap_err().contains("e.g. 250ms"));
        assert!(duration("").is_err());
    }

    #[test]
    fn limits_are_checked() {
        assert!(check_interval("1ms").unwrap_err().contains("out of range"));
        assert!(check_interval("11m").is_err());
        assert_eq!(check_interval("200ms"), Ok(Duration::from_millis(200)));
        assert!(replicas("100000").unwrap_err().contains("at most 10"));
        assert_eq!(replicas("3"), Ok(3));
        assert!(replicas("-1").is_err());
        assert!(positive("0s").is_err());
        assert_eq!(span("2T"), Ok(Span::T(2.0)));
        assert_eq!(span("30ms"), Ok(Span::Abs(Duration::from_millis(30))));
        assert!(span("30").is_err());
    }
}
