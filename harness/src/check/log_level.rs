//! The level of a replica's log line, read from the formats services log in: the spec's log
//! lines are clauses (RUN-4 and DEM-1 at WARN), and a service says WARN in many ways
//! (`level=warning`, `"level":"warn"`, `"level":40`, `WARN`, `WARNING`).
//!
//! Read, in this order (the first that names a level decides):
//! 1. a JSON object's `level`, `lvl` or `severity` (zap, pino, bunyan, slog's JSON handler,
//!    logrus's JSON formatter, Rust's `tracing` JSON layer, Google Cloud's `severity`); pino's
//!    and bunyan's numbers (10 trace, 20 debug, 30 info, 40 warn, 50 error, 60 fatal) too;
//! 2. logfmt's `level=` or `lvl=` (logrus's text formatter, slog's text handler, go-kit);
//! 3. the plain `… LEVEL message` form: the first of the line's first four words that names a
//!    level, brackets and what follows a colon aside (Python's logging, its default
//!    `WARNING:root:…` too, `tracing`'s default format, zap's console encoder, log4j and logback
//!    patterns: `WARN`, `[WARN]`, `WARNING:`).

use serde_json::Value;

/// A log line's level. FATAL, CRITICAL and PANIC read as [`LogLevel::Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// TRACE.
    Trace,
    /// DEBUG.
    Debug,
    /// INFO.
    Info,
    /// WARN, WARNING.
    Warn,
    /// ERROR, and the levels above it.
    Error,
}

impl LogLevel {
    /// The level `word` names, in upper, lower or title case (`warn`, `WARNING`, `Error`);
    /// `None` for any other word.
    pub fn named(word: &str) -> Option<LogLevel> {
        let case_ok = word == word.to_uppercase()
            || word == word.to_lowercase()
            || word.chars().skip(1).all(|c| c.is_lowercase());
        if !case_ok {
            return None;
        }
        match word.to_lowercase().as_str() {
            "trace" => Some(LogLevel::Trace),
            "debug" => Some(LogLevel::Debug),
            "info" => Some(LogLevel::Info),
            "warn" | "warning" => Some(LogLevel::Warn),
            "error" | "err" | "fatal" | "critical" | "crit" | "panic" => Some(LogLevel::Error),
            _ => None,
        }
    }

    /// pino's and bunyan's numeric levels.
    fn numbered(n: f64) -> Option<LogLevel> {
        match n as i64 {
            10 => Some(LogLevel::Trace),
            20 => Some(LogLevel::Debug),
            30 => Some(LogLevel::Info),
            40 => Some(LogLevel::Warn),
            50 | 60 => Some(LogLevel::Error),
            _ => None,
        }
    }

    /// The level of `line`, read as the module says; `None` when no form names one.
    pub fn of(line: &str) -> Option<LogLevel> {
        let line = line.trim();
        if line.starts_with('{') {
            if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(line) {
                let level = ["level", "lvl", "severity"]
                    .iter()
                    .find_map(|k| fields.get(*k));
                return match level {
                    Some(Value::String(s)) => LogLevel::named(s),
                    Some(Value::Number(n)) => n.as_f64().and_then(LogLevel::numbered),
                    _ => None,
                };
            }
        }
        let words = || line.split_whitespace();
        let logfmt = words().find_map(|w| {
            let (key, value) = w.split_once('=')?;
            matches!(key, "level" | "lvl").then(|| value.trim_matches('"'))
        });
        if let Some(value) = logfmt {
            return LogLevel::named(value);
        }
        words().take(4).find_map(|w| {
            let w = w
                .trim_start_matches('[')
                .split(':')
                .next()
                .unwrap_or_default();
            LogLevel::named(w.trim_end_matches(']'))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::LogLevel::{self, *};

    /// One line of each format the contract names, at WARN unless its level says otherwise.
    #[test]
    fn each_format_s_warn_line_reads_as_warn() {
        let warn = [
            // Python's logging (the examples write WARNING as WARN; the default name too).
            "2026-12-07 13:20:36,307 WARN r1: background leader lost lock",
            "2026-12-07 13:20:36,307 WARNING r1: background leader lost lock",
            "WARNING:root:background leader lost lock",
            // Rust's tracing, default format and JSON layer.
            "2026-12-07T13:20:36.307Z  WARN elector::run: background leader lost lock",
            r#"{"timestamp":"2026-12-07T13:20:36.307Z","level":"WARN","fields":{"message":"lost"},"target":"elector"}"#,
            // Go: logrus (text and JSON), slog (text and JSON), zap (JSON and console).
            r#"time="2026-12-07T13:20:36Z" level=warning msg="background leader lost lock""#,
            r#"{"level":"warning","msg":"background leader lost lock","time":"2026-12-07T13:20:36Z"}"#,
            "time=2026-12-07T13:20:36.307Z level=WARN msg=\"background leader lost lock\"",
            r#"{"time":"2026-12-07T13:20:36.307Z","level":"WARN","msg":"background leader lost lock"}"#,
            r#"{"level":"warn","ts":1796649636.307,"caller":"main.go:80","msg":"lost lock"}"#,
            "2026-12-07T13:20:36.307Z\twarn\tmain.go:80\tbackground leader lost lock",
            // Node: pino and bunyan's numbers.
            r#"{"level":40,"time":1796649636307,"pid":7,"hostname":"r1","msg":"lost lock"}"#,
            // Java: log4j and logback patterns; Google Cloud's severity.
            "13:20:36.307 [main] WARN  com.example.Leader - background leader lost lock",
            "[WARN] background leader lost lock",
            r#"{"severity":"WARNING","message":"background leader lost lock"}"#,
        ];
        for line in warn {
            assert_eq!(LogLevel::of(line), Some(Warn), "{line}");
        }
    }

    #[test]
    fn the_other_levels_and_lines_without_one() {
        let cases: [(&str, Option<LogLevel>); 9] = [
            (
                "2026-12-07 13:20:36,307 INFO r1: background leader lock acquired",
                Some(Info),
            ),
            (r#"{"level":30,"msg":"acquired"}"#, Some(Info)),
            (r#"{"level":"error","msg":"x"}"#, Some(Error)),
            ("time=x level=DEBUG msg=y", Some(Debug)),
            ("2026-12-07T13:20:36Z ERROR elector: failed", Some(Error)),
            // An INFO line whose message says WARN is at INFO.
            (
                "2026-12-07 13:20:36,307 INFO r1: the WARN line comes later",
                Some(Info),
            ),
            ("Traceback (most recent call last):", None),
            ("    self.wfile.write(body)", None),
            // A level word in the message, past the first four words, names no level.
            ("r1 says that the lock was lost: error", None),
        ];
        for (line, level) in cases {
            assert_eq!(LogLevel::of(line), level, "{line}");
        }
        assert_eq!(LogLevel::named("wArN"), None);
        assert_eq!(LogLevel::named("Warning"), Some(Warn));
    }
}
