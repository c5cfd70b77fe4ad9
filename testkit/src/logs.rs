//! Captures tracing events in the order they were emitted, with their fields, and can run a
//! hook (or panic) inside the logging call of a chosen event.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

/// One captured event.
#[derive(Clone, Debug)]
pub struct Event {
    /// When it was emitted.
    pub at: Instant,
    /// Its level.
    pub level: tracing::Level,
    /// Its message.
    pub message: String,
    /// Its other fields, as text.
    pub fields: BTreeMap<String, String>,
}

type Hook = Box<dyn Fn(&Event) + Send + Sync>;

/// The capture. Cheap to clone; clones share the events.
#[derive(Clone, Default)]
pub struct Logs {
    events: Arc<Mutex<Vec<Event>>>,
    panic_on: Arc<Mutex<Option<String>>>,
    hooks: Arc<Mutex<Vec<Hook>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Logs {
    /// Installs the capture as this thread's default subscriber until the guard drops (for a
    /// current-thread runtime).
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let guard = tracing::subscriber::set_default(Registry::default().with(logs.clone()));
        (logs, guard)
    }

    /// Installs the capture as the process's global subscriber (for a multi-thread runtime; a
    /// test binary run by nextest is one process per test). Panics when one is already set.
    pub fn capture_global() -> Logs {
        let logs = Logs::default();
        tracing::subscriber::set_global_default(Registry::default().with(logs.clone()))
            .expect("no global subscriber yet");
        logs
    }

    /// The next event whose message starts with `prefix` panics inside the logging call, once.
    pub fn panic_on(&self, prefix: &str) {
        *lock(&self.panic_on) = Some(prefix.to_owned());
    }

    /// Runs `hook` inside the logging call of every later event, after it is recorded.
    pub fn on_event(&self, hook: impl Fn(&Event) + Send + Sync + 'static) {
        lock(&self.hooks).push(Box::new(hook));
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        lock(&self.events).clone()
    }

    /// Events whose message starts with `prefix`.
    pub fn matching(&self, prefix: &str) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| e.message.starts_with(prefix))
            .collect()
    }

    /// The index of the first event whose message starts with `prefix`.
    pub fn position(&self, prefix: &str) -> Option<usize> {
        self.events()
            .iter()
            .position(|e| e.message.starts_with(prefix))
    }
}

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Logs {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let captured = Event {
            at: Instant::now(),
            level: *event.metadata().level(),
            message,
            fields: fields.0,
        };
        lock(&self.events).push(captured.clone());
        for hook in lock(&self.hooks).iter() {
            hook(&captured);
        }
        let trigger = {
            let mut armed = lock(&self.panic_on);
            let hit = armed
                .as_deref()
                .is_some_and(|p| captured.message.starts_with(p));
            if hit {
                armed.take()
            } else {
                None
            }
        };
        if trigger.is_some() {
            panic!("injected panic in the log call of {:?}", captured.message);
        }
    }
}
