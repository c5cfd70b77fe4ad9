#!/bin/sh
# Writes /etc/pgbouncer/pgbouncer.ini from the environment and runs PgBouncer in the foreground.
set -eu
: "${DB_HOST:?DB_HOST is required}"
: "${DB_PORT:=5432}"
: "${DB_USER:=postgres}"
: "${DB_PASSWORD:=}"
: "${DB_NAME:=*}"
: "${POOL_MODE:=session}"
: "${LISTEN_PORT:=5432}"
: "${MAX_CLIENT_CONN:=200}"
: "${DEFAULT_POOL_SIZE:=20}"
: "${AUTH_TYPE:=plain}"
: "${SERVER_LOGIN_RETRY:=15}"
mkdir -p /etc/pgbouncer /var/run/pgbouncer
cat >/etc/pgbouncer/pgbouncer.ini <<INI
[databases]
$DB_NAME = host=$DB_HOST port=$DB_PORT user=$DB_USER password=$DB_PASSWORD
[pgbouncer]
listen_addr = 0.0.0.0
listen_port = $LISTEN_PORT
unix_socket_dir =
auth_type = $AUTH_TYPE
auth_file = /etc/pgbouncer/userlist.txt
pool_mode = $POOL_MODE
max_client_conn = $MAX_CLIENT_CONN
default_pool_size = $DEFAULT_POOL_SIZE
server_login_retry = $SERVER_LOGIN_RETRY
ignore_startup_parameters = extra_float_digits,options
logfile =
pidfile =
INI
printf '"%s" "%s"\n' "$DB_USER" "$DB_PASSWORD" >/etc/pgbouncer/userlist.txt
chown -R postgres:postgres /etc/pgbouncer /var/run/pgbouncer
exec setpriv --reuid=postgres --regid=postgres --init-groups pgbouncer /etc/pgbouncer/pgbouncer.ini
