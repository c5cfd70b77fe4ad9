# shellcheck shell=bash
# Sourced by the ci scripts: the local images built by ci/build-images.sh, unless already set.
export ELECTOR_POSTGRES_IMAGE=${ELECTOR_POSTGRES_IMAGE:-elector-local/postgres:15}
export ELECTOR_PGBOUNCER_IMAGE=${ELECTOR_PGBOUNCER_IMAGE:-elector-local/pgbouncer:1.18}
export ELECTOR_TOXIPROXY_IMAGE=${ELECTOR_TOXIPROXY_IMAGE:-elector-local/toxiproxy:dev}
