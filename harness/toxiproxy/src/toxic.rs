//! Toxic definitions: the types, their attributes and their JSON form.
//!
//! The JSON shape is upstream Toxiproxy's:
//! `{"name", "type", "stream", "toxicity", "attributes": {...}}`; every attribute is an integer
//! (Go `int64`), so a float or a string is a 400, and unknown attribute keys are ignored.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// What an applied `timeout` toxic does when its input ends (the source closed, or reading it
/// failed). A server-wide option: see the crate docs, "The `timeout` toxic".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TimeoutMode {
    /// Upstream Toxiproxy since 2.1.4: the toxic closes its link, so the close reaches the
    /// destination at once (and, the socket being closed, the other direction ends too).
    #[default]
    Upstream,
    /// A network partition, as upstream up to 2.1.3 behaved: the end of stream is held, so the
    /// destination is not told until the toxic goes, its timer fires, the other peer closes or
    /// the proxy stops.
    Partition,
}

impl TimeoutMode {
    /// The option's value for this mode: `upstream` or `partition`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Upstream => "upstream",
            Self::Partition => "partition",
        }
    }
}

impl std::fmt::Display for TimeoutMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TimeoutMode {
    type Err = crate::error::ParseTimeoutModeError;

    /// Parses `upstream` or `partition`, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "upstream" => Ok(Self::Upstream),
            "partition" => Ok(Self::Partition),
            _ => Err(crate::error::ParseTimeoutModeError(s.to_owned())),
        }
    }
}

/// Which way data flows through a toxic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client to upstream server.
    Upstream,
    /// Upstream server to client (the default stream).
    Downstream,
}

impl Direction {
    /// Parses a stream name case-insensitively, like upstream.
    pub fn parse(stream: &str) -> Option<Self> {
        match stream.to_ascii_lowercase().as_str() {
            "upstream" => Some(Self::Upstream),
            "downstream" => Some(Self::Downstream),
            _ => None,
        }
    }
}

/// A toxic's type with its attributes (all integers, as upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToxicKind {
    /// Passes data unchanged.
    Noop,
    /// Delays each chunk by `latency` ms, plus or minus up to `jitter` ms.
    Latency {
        /// Delay in milliseconds.
        latency: i64,
        /// Random variation in milliseconds.
        jitter: i64,
    },
    /// Limits throughput to `rate` KB/s; 0 holds all data (a stall).
    Bandwidth {
        /// Rate in KB/s (1 KB = 1000 bytes, as upstream).
        rate: i64,
    },
    /// Delays the close of the connection by `delay` ms.
    SlowClose {
        /// Delay in milliseconds.
        delay: i64,
    },
    /// Drops all data; closes the connection after `timeout` ms without data (0: never). What
    /// it does when its input ends is the server's [`TimeoutMode`].
    Timeout {
        /// Timeout in milliseconds.
        timeout: i64,
    },
    /// On the first data, waits `timeout` ms then resets the connection (TCP RST).
    ResetPeer {
        /// Delay in milliseconds.
        timeout: i64,
    },
    /// Slices each chunk by halving it until the pieces are at most `average_size +
    /// size_variation` long (each cut moved by up to ± `size_variation`), with `delay`
    /// microseconds after every piece.
    Slicer {
        /// Average slice size in bytes.
        average_size: i64,
        /// Variation of the slice size in bytes.
        size_variation: i64,
        /// Delay between slices in microseconds.
        delay: i64,
    },
    /// Closes the connection once `bytes` bytes have passed.
    LimitData {
        /// Number of bytes allowed through.
        bytes: i64,
    },
}

impl ToxicKind {
    /// The toxic for a type name, with all attributes 0; `None` for an unknown type.
    pub fn from_type(name: &str) -> Option<Self> {
        Some(match name {
            "noop" => Self::Noop,
            "latency" => Self::Latency {
                latency: 0,
                jitter: 0,
            },
            "bandwidth" => Self::Bandwidth { rate: 0 },
            "slow_close" => Self::SlowClose { delay: 0 },
            "timeout" => Self::Timeout { timeout: 0 },
            "reset_peer" => Self::ResetPeer { timeout: 0 },
            "slicer" => Self::Slicer {
                average_size: 0,
                size_variation: 0,
                delay: 0,
            },
            "limit_data" => Self::LimitData { bytes: 0 },
            _ => return None,
        })
    }

    /// The type name, as used in JSON.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::Latency { .. } => "latency",
            Self::Bandwidth { .. } => "bandwidth",
            Self::SlowClose { .. } => "slow_close",
            Self::Timeout { .. } => "timeout",
            Self::ResetPeer { .. } => "reset_peer",
            Self::Slicer { .. } => "slicer",
            Self::LimitData { .. } => "limit_data",
        }
    }

    fn fields_mut(&mut self) -> Vec<(&'static str, &mut i64)> {
        match self {
            Self::Noop => vec![],
            Self::Latency { latency, jitter } => vec![("latency", latency), ("jitter", jitter)],
            Self::Bandwidth { rate } => vec![("rate", rate)],
            Self::SlowClose { delay } => vec![("delay", delay)],
            Self::Timeout { timeout } | Self::ResetPeer { timeout } => vec![("timeout", timeout)],
            Self::Slicer {
                average_size,
                size_variation,
                delay,
            } => vec![
                ("average_size", average_size),
                ("size_variation", size_variation),
                ("delay", delay),
            ],
            Self::LimitData { bytes } => vec![("bytes", bytes)],
        }
    }

    /// The attributes as a JSON object.
    pub fn attributes(&self) -> Map<String, Value> {
        let mut copy = *self;
        copy.fields_mut()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::from(*v)))
            .collect()
    }

    /// Sets the attributes present in `value` (an object, or null for none), keeping the others.
    /// Keys match case-insensitively and unknown keys are ignored, like Go's JSON decoder.
    pub fn apply_attributes(&mut self, value: &Value) -> Result<(), ApiError> {
        let obj = match value {
            Value::Null => return Ok(()),
            Value::Object(obj) => obj,
            other => {
                return Err(ApiError::bad_body(format!(
                    "attributes must be an object, got {}",
                    json_kind(other)
                )))
            }
        };
        let type_name = self.type_name();
        for (key, v) in obj {
            for (name, slot) in self.fields_mut() {
                if name.eq_ignore_ascii_case(key) {
                    *slot = as_int(v).ok_or_else(|| {
                        ApiError::bad_body(format!(
                            "attribute {name} of toxic type {type_name} must be an integer, got {v}"
                        ))
                    })?;
                }
            }
        }
        Ok(())
    }
}

fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Null => Some(0),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// A short name of a JSON value's kind, for error messages.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A toxic as configured on a proxy.
#[derive(Clone, Debug, PartialEq)]
pub struct Toxic {
    /// Unique id within the server's lifetime (a re-created toxic with the same name is new).
    pub id: u64,
    /// Bumped on every update, so live connections can tell an update happened.
    pub generation: u64,
    /// The toxic's name, unique within its proxy.
    pub name: String,
    /// The stream as given (case preserved, like upstream).
    pub stream: String,
    /// The parsed stream.
    pub direction: Direction,
    /// Probability that the toxic applies to a connection (rolled per connection).
    pub toxicity: f32,
    /// Type and attributes.
    pub kind: ToxicKind,
}

/// The JSON form of a toxic.
#[derive(Clone, Debug, Serialize)]
pub struct ToxicView {
    /// Attributes of the toxic's type.
    pub attributes: Map<String, Value>,
    /// Name.
    pub name: String,
    /// Type name.
    #[serde(rename = "type")]
    pub kind: String,
    /// `upstream` or `downstream`.
    pub stream: String,
    /// Probability of applying to a connection.
    pub toxicity: f32,
}

impl Toxic {
    /// The JSON form.
    pub fn view(&self) -> ToxicView {
        ToxicView {
            attributes: self.kind.attributes(),
            name: self.name.clone(),
            kind: self.kind.type_name().to_owned(),
            stream: self.stream.clone(),
            toxicity: self.toxicity,
        }
    }

    /// Parses a create request like upstream's `AddToxicJson`: stream defaults to `downstream`,
    /// toxicity to 1.0, name to `<type>_<stream>`. The returned toxic has id and generation 0.
    pub fn parse_new(body: &Value) -> Result<Self, ApiError> {
        let obj = body.as_object().ok_or_else(|| {
            ApiError::bad_body(format!("expected a JSON object, got {}", json_kind(body)))
        })?;
        let name = opt_string(obj, "name")?.unwrap_or_default();
        let type_name = opt_string(obj, "type")?.unwrap_or_default();
        let stream = opt_string(obj, "stream")?.unwrap_or_else(|| "downstream".to_owned());
        let toxicity = opt_toxicity(obj)?.unwrap_or(1.0);
        let direction = Direction::parse(&stream).ok_or_else(ApiError::invalid_stream)?;
        let name = if name.is_empty() {
            format!("{type_name}_{stream}")
        } else {
            name
        };
        let kind = ToxicKind::from_type(&type_name).ok_or_else(ApiError::invalid_toxic_type)?;
        Ok(Self {
            id: 0,
            generation: 0,
            name,
            stream,
            direction,
            toxicity,
            kind,
        })
    }

    /// Applies the attributes of a create request (done after the name check, like upstream).
    pub fn parse_attributes(&mut self, body: &Value) -> Result<(), ApiError> {
        if let Some(attrs) = get_ci(body, "attributes") {
            self.kind.apply_attributes(attrs)?;
        }
        Ok(())
    }

    /// Applies an update request like upstream's `UpdateToxicJson`: attributes present are set,
    /// the others kept; toxicity is set when given. Name, type and stream cannot change.
    pub fn apply_update(&mut self, body: &Value) -> Result<(), ApiError> {
        let obj = body.as_object().ok_or_else(|| {
            ApiError::bad_body(format!("expected a JSON object, got {}", json_kind(body)))
        })?;
        let mut kind = self.kind;
        if let Some(attrs) = get_ci(body, "attributes") {
            kind.apply_attributes(attrs)?;
        }
        if let Some(t) = opt_toxicity(obj)? {
            self.toxicity = t;
        }
        self.kind = kind;
        Ok(())
    }
}

/// Looks a key up case-insensitively (exact match first), like Go's JSON decoder.
pub(crate) fn get_ci<'a>(body: &'a Value, key: &str) -> Option<&'a Value> {
    lookup(body.as_object()?, key)
}

/// Looks a key up in an object case-insensitively (exact match first).
pub(crate) fn lookup<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

/// An optional string field; null counts as absent.
pub(crate) fn opt_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match lookup(obj, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::bad_body(format!(
            "field {key} must be a string, got {}",
            json_kind(other)
        ))),
    }
}

/// An optional boolean field; null counts as absent.
pub(crate) fn opt_bool(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match lookup(obj, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(ApiError::bad_body(format!(
            "field {key} must be a boolean, got {}",
            json_kind(other)
        ))),
    }
}

fn opt_toxicity(obj: &Map<String, Value>) -> Result<Option<f32>, ApiError> {
    match lookup(obj, "toxicity") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64().map(|f| f as f32)),
        Some(other) => Err(ApiError::bad_body(format!(
            "field toxicity must be a number, got {}",
            json_kind(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_follow_upstream() {
        let t = Toxic::parse_new(&json!({"type": "latency"})).unwrap();
        assert_eq!(t.name, "latency_downstream");
        assert_eq!(t.direction, Direction::Downstream);
        assert_eq!(t.toxicity, 1.0);
        assert_eq!(
            t.kind,
            ToxicKind::Latency {
                latency: 0,
                jitter: 0
            }
        );
    }

    #[test]
    fn attributes_parse_and_update_partially() {
        let body = json!({"type": "slicer", "stream": "UpStream",
            "attributes": {"average_size": 10, "Delay": 5, "unknown": "x"}});
        let mut t = Toxic::parse_new(&body).unwrap();
        t.parse_attributes(&body).unwrap();
        assert_eq!(t.name, "slicer_UpStream");
        assert_eq!(t.direction, Direction::Upstream);
        assert_eq!(
            t.kind,
            ToxicKind::Slicer {
                average_size: 10,
                size_variation: 0,
                delay: 5
            }
        );
        t.apply_update(&json!({"attributes": {"size_variation": 3}, "toxicity": 0.5}))
            .unwrap();
        assert_eq!(
            t.kind,
            ToxicKind::Slicer {
                average_size: 10,
                size_variation: 3,
                delay: 5
            }
        );
        assert_eq!(t.toxicity, 0.5);
    }

    #[test]
    fn timeout_mode_parses_its_two_values() {
        assert_eq!(TimeoutMode::default(), TimeoutMode::Upstream);
        for mode in [TimeoutMode::Upstream, TimeoutMode::Partition] {
            assert_eq!(mode.as_str().parse::<TimeoutMode>().unwrap(), mode);
            assert_eq!(mode.to_string(), mode.as_str());
        }
        assert_eq!(
            " Partition ".parse::<TimeoutMode>().unwrap(),
            TimeoutMode::Partition
        );
        let err = "hold".parse::<TimeoutMode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid timeout mode \"hold\": expected upstream or partition"
        );
    }

    #[test]
    fn bad_input_is_rejected() {
        assert_eq!(
            Toxic::parse_new(&json!({"type": "nope"})).unwrap_err(),
            ApiError::invalid_toxic_type()
        );
        assert_eq!(
            Toxic::parse_new(&json!({"type": "latency", "stream": "sideways"})).unwrap_err(),
            ApiError::invalid_stream()
        );
        let body = json!({"type": "latency", "attributes": {"latency": 1.5}});
        let mut t = Toxic::parse_new(&body).unwrap();
        assert_eq!(t.parse_attributes(&body).unwrap_err().status, 400);
    }
}
