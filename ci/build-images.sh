#!/usr/bin/env bash
# Builds the container images the tests and the conformance suite use, offline, from Debian
# packages (no container registry is needed). Idempotent: an image whose recipe hash label
# matches is kept as it is.
#
#   ci/build-images.sh [postgres] [pgbouncer] [toxiproxy]    (default: all three)
#
# Images (override the names with the harness's flags / environment when you have a registry):
#   elector-local/debian-base:bookworm   debootstrap minbase + postgresql-15 + pgbouncer
#   elector-local/postgres:15            upstream `postgres` image contract
#   elector-local/pgbouncer:1.18         edoburu/pgbouncer environment contract
#   elector-local/toxiproxy:dev          the workspace's Toxiproxy-compatible server
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=elector-local/debian-base:bookworm
label=org.elector.recipe

log() { printf '[build-images] %s\n' "$*" >&2; }

docker info >/dev/null 2>&1 || {
  log "error: no Docker daemon answers (docker info failed). Start Docker and try again."
  exit 1
}

recipe_of() { # recipe hash of the contents of files and of strings given (never of paths,
  # so every checkout of the same commit agrees)
  { for f in "$@"; do if [ -f "$f" ]; then basename "$f"; sha256sum <"$f"; else printf '%s\n' "$f"; fi; done; } |
    sha256sum | cut -c1-16
}
current() { docker image inspect -f "{{ index .Config.Labels \"$label\" }}" "$1" 2>/dev/null || true; }

base_packages="postgresql-15 pgbouncer ca-certificates util-linux procps"
base_recipe=$(recipe_of "$base_packages" "$mirror" "$here/build-images.sh")

build_base() {
  if [ "$(current "$base")" = "$base_recipe" ]; then log "$base is up to date"; return; fi
  command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  local rootfs; rootfs=$(mktemp -d /var/tmp/elector-rootfs.XXXXXX)
  chmod 755 "$rootfs" # mktemp makes it 0700; the image's / must be traversable by postgres
  local out=/var/tmp/elector-build-images.log; : >"$out"
  trap 'umount -lf "$rootfs/proc" 2>/dev/null || true; rm -rf "$rootfs"' RETURN
  log "debootstrap bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >>"$out" 2>&1 ||
    { log "error: debootstrap failed, see $out"; tail -20 "$out" >&2; return 1; }
  printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"; chmod +x "$rootfs/usr/sbin/policy-rc.d"
  mount -t proc proc "$rootfs/proc"
  log "installing $base_packages"
  chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends $base_packages >>"$out" 2>&1 ||
    { log "error: apt-get install failed, see $out"; tail -20 "$out" >&2; return 1; }
  # The package's own cluster is not used: the image's entrypoint runs initdb on PGDATA.
  chroot "$rootfs" sh -c 'pg_dropcluster --stop 15 main 2>/dev/null || true'
  chroot "$rootfs" apt-get clean
  umount -lf "$rootfs/proc"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs/usr/sbin/policy-rc.d"
  log "importing $base"
  tar -C "$rootfs" -c . | docker import --change "LABEL $label=$base_recipe" - "$base" >/dev/null
}

build_derived() { # name dir [extra recipe inputs...]
  local name=$1 dir=$2; shift 2
  local recipe; recipe=$(recipe_of "$base_recipe" "$dir"/* "$@")
  if [ "$(current "$name")" = "$recipe" ]; then log "$name is up to date"; return; fi
  log "building $name"
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" --label "$label=$recipe" -t "$name" "$dir" \
    >/dev/null 2>/var/tmp/elector-docker-build.log ||
    { log "error: docker build of $name failed:"; cat /var/tmp/elector-docker-build.log >&2; return 1; }
}

build_toxiproxy() {
  log "building the toxiproxy-server binary"
  (cd "$root" && cargo build -q --release -p toxiproxy-server)
  local ctx; ctx=$(mktemp -d)
  cp "$here/images/toxiproxy/Dockerfile" "$ctx/"
  cp "$root/target/release/toxiproxy-server" "$ctx/"
  build_derived elector-local/toxiproxy:dev "$ctx"
  rm -rf "$ctx"
}

want=("$@"); [ ${#want[@]} -gt 0 ] || want=(postgres pgbouncer toxiproxy)
start=$(date +%s)
build_base
for w in "${want[@]}"; do
  case $w in
    postgres) build_derived elector-local/postgres:15 "$here/images/postgres" ;;
    pgbouncer) build_derived elector-local/pgbouncer:1.18 "$here/images/pgbouncer" ;;
    toxiproxy) build_toxiproxy ;;
    *) log "error: unknown image '$w' (expected postgres, pgbouncer or toxiproxy)"; exit 2 ;;
  esac
done
log "images ready in $(( $(date +%s) - start )) s"
