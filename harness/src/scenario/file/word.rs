//! Words of the scenario vocabulary: fault verbs, wait conditions, events, control modes. Each
//! is an enum whose serde derive names its variants; a file writes those names, and a mistake
//! is reported with the words there are, read from the same derive.

use std::fmt;

use serde::de::{DeserializeOwned, IntoDeserializer, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::check::expect::Awaited;
use crate::event::EventKind;
use crate::fault::Verb;
use crate::scenario::model::{word, WaitFor};

/// A word of the vocabulary as a file's value: read and written as its name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Word<T>(pub T);

/// A type a file names with a word.
pub(super) trait Vocabulary: Sized {
    /// Reads `word`, or says what words there are.
    fn read(word: &str) -> Result<Self, String>;
    /// The word.
    fn write(&self) -> String;
}

impl Vocabulary for Verb {
    fn read(w: &str) -> Result<Self, String> {
        parse_as("fault", w)
    }

    fn write(&self) -> String {
        word(self)
    }
}

impl Vocabulary for WaitFor {
    fn read(w: &str) -> Result<Self, String> {
        parse_as("wait_for", w)
    }

    fn write(&self) -> String {
        word(self)
    }
}

impl Vocabulary for Awaited {
    fn read(w: &str) -> Result<Self, String> {
        if let Some(observed) = Awaited::OBSERVED.iter().find(|a| a.to_string() == w) {
            return Ok(*observed);
        }
        parse(w).map(Awaited::Event).map_err(|_| {
            let events = (Awaited::OBSERVED.iter())
                .map(ToString::to_string)
                .chain(words::<EventKind>().iter().map(|w| (*w).to_owned()));
            unknown("event", w, events.collect::<Vec<_>>().join(", "))
        })
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

impl<'de, T: Vocabulary> Deserialize<'de> for Word<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        T::read(&s).map(Word).map_err(serde::de::Error::custom)
    }
}

impl<T: Vocabulary> Serialize for Word<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.write())
    }
}

/// Reads `word` as the variant of `T` its serde derive names so.
fn parse<T: DeserializeOwned>(word: &str) -> Result<T, serde::de::value::Error> {
    T::deserialize(word.into_deserializer())
}

/// Reads `word` as a `T`, or says it is an unknown `what` and lists the words there are.
pub(super) fn parse_as<T: DeserializeOwned>(what: &str, word: &str) -> Result<T, String> {
    parse(word).map_err(|_| unknown(what, word, words::<T>().join(", ")))
}

fn unknown(what: &str, word: &str, words: String) -> String {
    format!("unknown {what} {word:?}: expected one of {words}")
}

/// The names of a serde-derived enum's variants, in their order, as the derive lists them.
pub(crate) fn words<T: DeserializeOwned>() -> &'static [&'static str] {
    match T::deserialize(Probe) {
        Err(Variants(names)) => names,
        Ok(_) => &[],
    }
}

/// A deserializer that asks for nothing but the variant names an enum's derive passes it.
struct Probe;

#[derive(Debug)]
struct Variants(&'static [&'static str]);

impl fmt::Display for Variants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "variants {:?}", self.0)
    }
}

impl std::error::Error for Variants {}

impl serde::de::Error for Variants {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Variants(&[])
    }
}

impl<'de> Deserializer<'de> for Probe {
    type Error = Variants;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Variants> {
        Err(Variants(&[]))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Variants> {
        Err(Variants(variants))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_come_from_the_derive() {
        assert_eq!(
            words::<WaitFor>(),
            [
                "leader",
                "new-leader",
                "no-leader",
                "ready",
                "all-ready",
                "leader-check"
            ]
        );
        assert_eq!(words::<Verb>().len(), 15);
        assert_eq!(
            words::<Verb>()[1..3],
            ["partition-requests", "partition-answers"]
        );
        assert_eq!(words::<Verb>()[8], "kill-backend");
        assert!(words::<EventKind>().contains(&"check_refused"));
        let e = Verb::read("nuke").unwrap_err();
        assert!(
            e.starts_with(
                "unknown fault \"nuke\": expected one of partition, partition-requests, \
                 partition-answers, stall"
            ),
            "{e}"
        );
        let e = Awaited::read("nope").unwrap_err();
        assert!(
            e.contains("expected one of lock_released, unlocked, timed_out, exited, started"),
            "{e}"
        );
        assert_eq!(Awaited::read("lock_released"), Ok(Awaited::LockReleased));
        assert_eq!(Awaited::read("unlocked"), Ok(Awaited::Unlocked));
        assert_eq!(Awaited::read("timed_out"), Ok(Awaited::TimedOut));
        assert_eq!(Awaited::read("exited"), Ok(Awaited::Exited));
        assert_eq!(Verb::read("kill-backend"), Ok(Verb::KillBackend));
    }
}
