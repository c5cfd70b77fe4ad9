//! Durations as scenarios write them: in units of T (`3T`, `0.5T`) or absolute (`250ms`, `2s`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written in a scenario: `3T`, `0.5T`, `250ms` or `2s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Span {
    /// A multiple of the check interval T.
    T(f64),
    /// An absolute duration.
    Abs(Duration),
}

impl Span {
    /// Parses `3T`, `0.5T`, `250ms`, `2s`.
    ///
    /// # Errors
    /// Not a finite, non-negative number followed by `T`, `ms` or `s`.
    pub fn parse(s: &str) -> Result<Span, String> {
        let s = s.trim();
        let bad =
            || format!("bad duration {s:?}: expected e.g. \"3T\", \"0.5T\", \"250ms\" or \"2s\"");
        let num = |n: &str| {
            n.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(bad)
        };
        // Whole nanoseconds, rounded: what is printed as `…ms` reads back the same.
        let abs = |n: f64, nanos_per_unit: f64| {
            Span::Abs(Duration::from_nanos((n * nanos_per_unit).round() as u64))
        };
        if let Some(n) = s.strip_suffix('T') {
            Ok(Span::T(num(n)?))
        } else if let Some(n) = s.strip_suffix("ms") {
            Ok(abs(num(n)?, 1e6))
        } else if let Some(n) = s.strip_suffix('s') {
            Ok(abs(num(n)?, 1e9))
        } else {
            Err(bad())
        }
    }

    /// The duration at check interval `t`.
    pub fn at(&self, t: Duration) -> Duration {
        match self {
            Span::T(k) => t.mul_f64(*k),
            Span::Abs(d) => *d,
        }
    }
}

/// Prints what [`Span::parse`] reads back as the same span: `3T`, `1.5T`, `250ms`, `0.5ms`.
impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Span::T(k) => write!(f, "{k}T"),
            Span::Abs(d) => {
                let nanos = d.subsec_nanos() % 1_000_000;
                if nanos == 0 {
                    write!(f, "{}ms", d.as_millis())
                } else {
                    let frac = format!("{nanos:06}");
                    write!(f, "{}.{}ms", d.as_millis(), frac.trim_end_matches('0'))
                }
            }
        }
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Span::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_back() {
        let ms = Duration::from_millis;
        assert_eq!(Span::parse("0.5T").unwrap().at(ms(200)), ms(100));
        assert_eq!(Span::parse("250ms").unwrap(), Span::Abs(ms(250)));
        assert_eq!(Span::parse("2s").unwrap(), Span::Abs(ms(2000)));
        assert!(Span::parse("3 parsecs").is_err());
        assert!(Span::parse("-1T").is_err());
        for (written, printed) in [
            ("3T", "3T"),
            ("1.50T", "1.5T"),
            ("2s", "2000ms"),
            ("0.5ms", "0.5ms"),
            ("1.000001s", "1000.001ms"),
            ("0.000000001s", "0.000001ms"),
        ] {
            let span = Span::parse(written).unwrap();
            assert_eq!(span.to_string(), printed);
            assert_eq!(Span::parse(printed).unwrap(), span);
        }
    }
}
