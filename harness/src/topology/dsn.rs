//! The database and its roles, the password and how [`redact`] keeps it out of what is shown,
//! and the DSNs and connections made with them.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use tokio_postgres::NoTls;

/// The database every service serves.
pub const DATABASE: &str = "plexsphere";
/// The PostgreSQL superuser: the harness's observer and its setup connect as it, never a
/// replica.
pub const USER: &str = "postgres";
/// The ordinary application role every replica connects as, directly and through PgBouncer, as
/// a service in production does: a login role that is not a superuser, owns nothing (not the
/// database, not a table) and holds only the grants of [`PROVISION`] (on PostgreSQL 15 and later
/// `public` grants it no CREATE). Its password is [`password`]'s.
pub const APP_USER: &str = "elector_app";

/// What the harness sets up as an operator would, as the superuser, once the server is up:
/// the application role, its right to connect and to use the schema, the contract's
/// `leader_work` table with the grants to write it, and X-FENCE's sequence created ahead with
/// the grants its users need (`elector/README.md`, "What the application role needs").
/// Idempotent; `{password}` is the role's password, quoted.
pub const PROVISION: &str = "DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'elector_app') THEN
    CREATE ROLE elector_app LOGIN PASSWORD {password};
  END IF;
END $$;
GRANT CONNECT ON DATABASE plexsphere TO elector_app;
GRANT USAGE ON SCHEMA public TO elector_app;
{work_table};
GRANT SELECT, INSERT ON leader_work TO elector_app;
GRANT USAGE ON SEQUENCE leader_work_id_seq TO elector_app;
CREATE SEQUENCE IF NOT EXISTS public.plexsphere_background_leader_fence;
GRANT USAGE, SELECT ON SEQUENCE public.plexsphere_background_leader_fence TO elector_app";

/// Runs [`PROVISION`] as the superuser on the server at `addr`.
///
/// # Errors
/// The server cannot be reached, or a statement fails.
pub async fn provision(addr: SocketAddr) -> anyhow::Result<()> {
    let client = try_connect(&dsn_for(addr), Duration::from_secs(10)).await?;
    let quoted = format!("'{}'", password().replace('\'', "''"));
    let sql = PROVISION
        .replace("{password}", &quoted)
        .replace("{work_table}", crate::event::WORK_TABLE_DDL);
    client.batch_execute(&sql).await.context(
        "setting up the application role elector_app, leader_work and the fence sequence",
    )?;
    Ok(())
}
/// The PostgreSQL user's password when [`ENV_PASSWORD`] sets none.
pub const PASSWORD: &str = "postgres";
/// The environment variable that sets the throwaway database's password.
pub const ENV_PASSWORD: &str = "ELECTOR_POSTGRES_PASSWORD";

/// The PostgreSQL user's password: [`ENV_PASSWORD`], else [`PASSWORD`]. Read once per process.
/// DSNs carry it; [`redact`] takes it out of any text that is shown or written.
pub fn password() -> &'static str {
    static PASSWORD_IN_USE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PASSWORD_IN_USE.get_or_init(|| {
        std::env::var(ENV_PASSWORD)
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| PASSWORD.to_owned())
    })
}

/// `text` with the password of every DSN in it replaced by `***`: the URL form
/// (`postgres://user:secret@host`) and the key-value form (`password=secret`).
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        match (tail[..authority].rfind('@'), tail[..authority].find(':')) {
            (Some(amp), Some(colon)) if colon < amp => {
                out.push_str(&tail[..=colon]);
                out.push_str("***");
                rest = &tail[amp..];
            }
            _ => rest = tail,
        }
    }
    out.push_str(rest);
    redact_key_values(&out)
}

/// The `password=…` pairs of a key-value DSN, redacted.
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("password=") {
        let (head, tail) = rest.split_at(at + "password=".len());
        out.push_str(head);
        let end = if let Some(quoted) = tail.strip_prefix('\'') {
            quoted.find('\'').map_or(tail.len(), |e| e + 2)
        } else {
            tail.find(char::is_whitespace).unwrap_or(tail.len())
        };
        out.push_str("***");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The observer's `application_name`.
pub const OBSERVER_APP: &str = "elector-harness-observer";

/// A DSN for PostgreSQL (or a PgBouncer, or a proxy) at `addr`, with the [`password`]. It
/// asks for `sslmode=disable`: the hop a replica's proxy observes must be plain for its tap to
/// read the conversation (a client's default, `prefer`, would encrypt it wherever the server
/// offers TLS).
pub fn dsn_for(addr: SocketAddr) -> String {
    dsn_as(USER, addr)
}

/// The application role's DSN for `addr` ([`APP_USER`]): what a replica is given.
pub fn app_dsn_for(addr: SocketAddr) -> String {
    dsn_as(APP_USER, addr)
}

fn dsn_as(user: &str, addr: SocketAddr) -> String {
    format!(
        "postgres://{user}:{}@{}:{}/{DATABASE}?sslmode=disable",
        password(),
        addr.ip(),
        addr.port()
    )
}

/// Connects once to `dsn` (the connection runs in a task of the current runtime), with
/// `application_name` = [`OBSERVER_APP`] unless the DSN sets one.
///
/// # Errors
/// The connection failed or took longer than `timeout`.
pub async fn try_connect(dsn: &str, timeout: Duration) -> anyhow::Result<tokio_postgres::Client> {
    let mut config = tokio_postgres::Config::from_str(dsn).context("a PostgreSQL DSN")?;
    if config.get_application_name().is_none() {
        config.application_name(OBSERVER_APP);
    }
    config.connect_timeout(timeout);
    let (client, connection) = tokio::time::timeout(timeout, config.connect(NoTls))
        .await
        .map_err(|_| anyhow!("connecting to {}: no answer in {timeout:?}", redact(dsn)))?
        .with_context(|| format!("connecting to {}", redact(dsn)))?;
    tokio::spawn(connection);
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsn_passwords_are_redacted() {
        assert_eq!(
            redact("connecting to postgres://postgres:s3cret@127.0.0.1:5432/plexsphere: refused"),
            "connecting to postgres://postgres:***@127.0.0.1:5432/plexsphere: refused"
        );
        assert_eq!(
            redact("a postgresql://u:p@h/db and b postgres://u:q@[::1]:5/db?sslmode=disable"),
            "a postgresql://u:***@h/db and b postgres://u:***@[::1]:5/db?sslmode=disable"
        );
        assert_eq!(
            redact("host=h user=u password=s3cret dbname=d; password='a b' x"),
            "host=h user=u password=*** dbname=d; password=*** x"
        );
        for kept in [
            "postgres://h:5432/db",
            "http://127.0.0.1:8474/proxies",
            "no dsn",
        ] {
            assert_eq!(redact(kept), kept);
        }
    }
}
