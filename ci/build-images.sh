#!/usr/bin/env bash
# Builds the container images the tests and the conformance suite use, offline, from Debian
# packages (no container registry is needed). Idempotent: an image whose recipe hash label
# matches is kept as it is.
#
#   ci/build-images.sh [postgres] [pgbouncer] [toxiproxy]    (default: all three)
#   ci/build-images.sh --print-recipe-hash   the recipe hash of the Debian-built images (base,
#                                            postgres, pgbouncer): a cache key for --save
#   ci/build-images.sh --save DIR            docker save those images to DIR/images.tar
#   ci/build-images.sh --load DIR            docker load DIR/images.tar, when there is one
#
# Images (override the names with the harness's flags / environment when you have a registry):
#   elector-local/debian-base:bookworm   debootstrap minbase + postgresql-15 + pgbouncer
#   elector-local/postgres:15            upstream `postgres` image contract
#   elector-local/pgbouncer:1.18         edoburu/pgbouncer environment contract
#   elector-local/toxiproxy:dev          the workspace's Toxiproxy-compatible server
#
# Needs Docker; building the base also needs root (or sudo that asks no password) and
# debootstrap, and the toxiproxy image needs cargo (ci/prereqs.sh checks, and installs what it can).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=ci/prereqs.sh
source "$here/prereqs.sh"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=elector-local/debian-base:bookworm
postgres=elector-local/postgres:15
pgbouncer=elector-local/pgbouncer:1.18
toxiproxy=elector-local/toxiproxy:dev
label=org.elector.recipe

log() { printf '[build-images] %s\n' "$*" >&2; }

recipe_of() { # recipe hash of the contents of files and of strings given (never of paths,
  # so every checkout of the same commit agrees)
  { for f in "$@"; do if [ -f "$f" ]; then basename "$f"; sha256sum <"$f"; else printf '%s\n' "$f"; fi; done; } |
    sha256sum | cut -c1-16
}
current() { docker image inspect -f "{{ index .Config.Labels \"$label\" }}" "$1" 2>/dev/null || true; }

base_packages="postgresql-15 pgbouncer ca-certificates util-linux procps"
# The base's recipe: what goes in and the steps that put it there (images/base/rootfs.sh).
base_recipe=$(recipe_of "$base_packages" "$mirror" "$here/images/base/rootfs.sh")
derived_recipe() { recipe_of "$base_recipe" "$1"/* "${@:2}"; } # dir [extra recipe inputs...]

case ${1:-} in
  --print-recipe-hash)
    recipe_of "$base_recipe" "$(derived_recipe "$here/images/postgres")" \
      "$(derived_recipe "$here/images/pgbouncer")"
    exit 0 ;;
  --save | --load)
    [ $# -eq 2 ] || { log "error: $1 needs a directory"; exit 2; }
    prereqs docker
    if [ "$1" = --save ]; then
      mkdir -p "$2"
      log "saving $base, $postgres and $pgbouncer to $2/images.tar"
      docker save -o "$2/images.tar" "$base" "$postgres" "$pgbouncer"
    elif [ -f "$2/images.tar" ]; then
      log "loading $2/images.tar"
      docker load -q -i "$2/images.tar" >/dev/null
    else
      log "no $2/images.tar to load"
    fi
    exit 0 ;;
esac

prereqs docker

build_base() {
  if [ "$(current "$base")" = "$base_recipe" ]; then log "$base is up to date"; return; fi
  prereqs root debootstrap
  local rootfs; rootfs=$(mktemp -d /var/tmp/elector-rootfs.XXXXXX)
  chmod 755 "$rootfs" # mktemp makes it 0700; the image's / must be traversable by postgres
  local out=/var/tmp/elector-build-images.log; : >"$out"
  # shellcheck disable=SC2064 # expand now: rootfs is local to this function
  trap "as_root umount -lf '$rootfs/proc' 2>/dev/null || true; as_root rm -rf '$rootfs'; trap - RETURN" RETURN
  log "debootstrap bookworm from $mirror, then $base_packages (log: $out)"
  # shellcheck disable=SC2086 # the package list is words
  as_root bash "$here/images/base/rootfs.sh" "$rootfs" "$mirror" $base_packages >>"$out" 2>&1 ||
    { log "error: building the root file system failed, see $out:"; tail -20 "$out" >&2; return 1; }
  log "importing $base"
  as_root tar -C "$rootfs" -c . | docker import --change "LABEL $label=$base_recipe" - "$base" >/dev/null
}

build_derived() { # name dir [extra recipe inputs...]
  local name=$1 dir=$2; shift 2
  local recipe; recipe=$(derived_recipe "$dir" "$@")
  if [ "$(current "$name")" = "$recipe" ]; then log "$name is up to date"; return; fi
  log "building $name"
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" --label "$label=$recipe" -t "$name" "$dir" \
    >/dev/null 2>/var/tmp/elector-docker-build.log ||
    { log "error: docker build of $name failed:"; cat /var/tmp/elector-docker-build.log >&2; return 1; }
}

build_toxiproxy() {
  prereqs cargo
  log "building the toxiproxy-server binary"
  (cd "$root" && cargo build -q --release -p toxiproxy-server)
  local ctx; ctx=$(mktemp -d)
  cp "$here/images/toxiproxy/Dockerfile" "$ctx/"
  cp "$root/target/release/toxiproxy-server" "$ctx/"
  build_derived "$toxiproxy" "$ctx"
  rm -rf "$ctx"
}

want=("$@"); [ ${#want[@]} -gt 0 ] || want=(postgres pgbouncer toxiproxy)
for w in "${want[@]}"; do
  case $w in
    postgres | pgbouncer | toxiproxy) ;;
    *) log "error: unknown image '$w' (expected postgres, pgbouncer or toxiproxy)"; exit 2 ;;
  esac
done
start=$(date +%s)
build_base
for w in "${want[@]}"; do
  case $w in
    postgres) build_derived "$postgres" "$here/images/postgres" ;;
    pgbouncer) build_derived "$pgbouncer" "$here/images/pgbouncer" ;;
    toxiproxy) build_toxiproxy ;;
  esac
done
log "images ready in $(( $(date +%s) - start )) s"
