#!/bin/sh
# Mirrors the upstream postgres image: initialise PGDATA on first start, then run the server as
# the postgres user in the foreground. Arguments after `postgres`, or flags alone
# (e.g. `-c fsync=off`), go to the server.
set -eu
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
: "${POSTGRES_INITDB_ARGS:=}"
template=/var/lib/postgresql/template.tar
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
sql_literal() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"; }
sql_ident() { printf '"%s"' "$(printf '%s' "$1" | sed 's/"/""/g')"; }

case "${1:-postgres}" in
  postgres) [ $# -gt 0 ] && shift ;;
  -*) ;;             # flags only: they go to the server, as upstream
  *) exec "$@" ;;    # any other command runs as it is
esac

mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
    echo "error: POSTGRES_PASSWORD is not set (or set POSTGRES_HOST_AUTH_METHOD=trust)" >&2
    exit 1
  fi
  if [ "$POSTGRES_USER" = postgres ] && [ "$POSTGRES_HOST_AUTH_METHOD" = scram-sha-256 ] &&
     [ -z "$POSTGRES_INITDB_ARGS" ] && [ -s "$template" ]; then
    tar -C "$PGDATA" -xf "$template"
  else
    pwfile=$(mktemp); printf '%s\n' "${POSTGRES_PASSWORD:-postgres}" >"$pwfile"; chown postgres "$pwfile"
    # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of flags, as upstream
    as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
      --auth-local=trust --auth-host="$POSTGRES_HOST_AUTH_METHOD" $POSTGRES_INITDB_ARGS >/dev/null
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    echo "host all all all $POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
  fi
  # The password and the database in single-user mode, where upstream starts, waits for and
  # stops a temporary server (480 ms of every start here, measured on 2026-12-07). -j: a
  # statement ends at a semicolon and an empty line; exit_on_error: one that fails stops the
  # start.
  {
    printf 'ALTER USER %s PASSWORD %s;\n\n' "$(sql_ident "$POSTGRES_USER")" \
      "$(sql_literal "${POSTGRES_PASSWORD:-postgres}")"
    if [ "$POSTGRES_DB" != postgres ]; then
      printf 'CREATE DATABASE %s;\n\n' "$(sql_ident "$POSTGRES_DB")"
    fi
  } | as_postgres postgres --single -j -D "$PGDATA" -c exit_on_error=on -c fsync=off postgres \
    >/dev/null
  # Upstream's temporary server prints the readiness line on stdout (the testcontainers module
  # waits for it there, and on stderr for the server's own).
  echo "PostgreSQL init process complete; ready for start up (the database system is ready to accept connections once the server below says so)."
fi

exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" "$@"
