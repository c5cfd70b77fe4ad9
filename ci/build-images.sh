#!/usr/bin/env bash
# Builds the container images the tests and the conformance suite use, offline, from Debian
# packages (no container registry is needed). Idempotent: an image whose recipe hash label
# matches is kept as it is.
#
#   ci/build-images.sh [--pg LIST] [postgres] [pgbouncer] [toxiproxy] [go-replica]
#                                            (default: the first three)
#   ci/build-images.sh [--pg LIST] --print-recipe-hash   the recipe hash of the Debian-built
#                                            images (base, postgres, pgbouncer of each major in
#                                            LIST): a cache key for --save
#   ci/build-images.sh [--pg LIST] --save DIR   docker save those images to DIR/images.tar
#   ci/build-images.sh [--pg LIST] --load DIR   docker load DIR/images.tar, when there is one
#                                            (with a LIST, then checks its images are there)
#
# LIST: the PostgreSQL majors, comma-separated (e.g. --pg 13,15,17); else ELECTOR_PG_VERSIONS
# (the flag wins); else 15. Each major comes from the Debian release that ships it, with that
# release's PgBouncer:
#   13  bullseye  postgresql-13, pgbouncer 1.15
#   15  bookworm  postgresql-15, pgbouncer 1.18   (the default)
#   17  trixie    postgresql-17, pgbouncer 1.24
# The toxiproxy image is one, built on the bookworm base, whatever LIST says.
#
# Images (override the names with the harness's flags / environment when you have a registry):
#   elector-local/debian-base:<release>  debootstrap minbase + postgresql-<major> + pgbouncer
#                                        (bookworm by default)
#   elector-local/postgres:<major>       upstream `postgres` image contract (15 by default)
#   elector-local/pgbouncer:<version>    edoburu/pgbouncer environment contract (1.18 by default)
#   elector-local/toxiproxy:dev          the workspace's Toxiproxy-compatible server
#
# go-replica is not an image but a binary: the Go example replica (replicas/go/), compiled in a
# docker build on the trixie base (Go 1.24 and pgx v4.18 from Debian, GOPATH mode, no module
# proxy), whatever LIST says, and copied out to target/replicas/go/replica. Skipped when
# target/replicas/go/replica.recipe holds its recipe hash (the trixie base's, the Dockerfile's
# and the sources').
#
# The recipe files under ci/images/ are templates: @DEBIAN_RELEASE@, @PG_MAJOR@ and
# @PGBOUNCER_VERSION@ are filled in for each release (bookworm's rendering is the files as they
# were before other releases were supported, so its recipe hash and caches stay valid), and the
# recipe hash covers the rendered files.
#
# Needs Docker; building a base also needs root (or sudo that asks no password) and
# debootstrap, and the toxiproxy image needs cargo (ci/prereqs.sh checks, and installs what it can).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=ci/prereqs.sh
source "$here/prereqs.sh"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
toxiproxy=elector-local/toxiproxy:dev
toxiproxy_major=15 # the toxiproxy image is built on this major's base
supported="13, 15 and 17"
label=org.elector.recipe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log() { printf '[build-images] %s\n' "$*" >&2; }

recipe_of() { # recipe hash of the contents of files and of strings given (never of paths,
  # so every checkout of the same commit agrees)
  { for f in "$@"; do if [ -f "$f" ]; then basename "$f"; sha256sum <"$f"; else printf '%s\n' "$f"; fi; done; } |
    sha256sum | cut -c1-16
}
current() { docker image inspect -f "{{ index .Config.Labels \"$label\" }}" "$1" 2>/dev/null || true; }

# The versions: --pg LIST (anywhere among the arguments), else ELECTOR_PG_VERSIONS, else 15.
pg_list=${ELECTOR_PG_VERSIONS:-} pg_explicit=''
[ -z "$pg_list" ] || pg_explicit=1
pg_usage="--pg needs a list of PostgreSQL majors, e.g. --pg 13,15,17"
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --pg | --pg=*)
      if [ "$1" = --pg ]; then
        [ $# -ge 2 ] || { log "error: $pg_usage"; exit 2; }
        pg_list=$2; shift
      else
        pg_list=${1#--pg=}
      fi
      shift; pg_explicit=1
      [ -n "$pg_list" ] || { log "error: $pg_usage"; exit 2; } ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- ${args[@]+"${args[@]}"}
IFS=', ' read -r -a listed <<<"${pg_list:-15}"
majors=()
for v in ${listed[@]+"${listed[@]}"}; do
  case $v in
    13 | 15 | 17) majors+=("$v") ;;
    '') ;; # 13,,17 or a trailing comma
    *) log "error: PostgreSQL '$v' is not supported (supported majors: $supported)"; exit 2 ;;
  esac
done
[ ${#majors[@]} -gt 0 ] ||
  { log "error: no PostgreSQL major in '$pg_list' (supported: $supported)"; exit 2; }
read -r -a majors <<<"$(printf '%s\n' "${majors[@]}" | sort -nu | tr '\n' ' ')"

# use_pg MAJOR: sets the names and recipe of MAJOR's images (release, base, postgres, pgbouncer,
# base_packages, base_recipe) and renders its recipe files into $recipes.
use_pg() {
  major=$1
  case $major in
    13) release=bullseye pgbouncer_version=1.15 ;;
    15) release=bookworm pgbouncer_version=1.18 ;;
    17) release=trixie pgbouncer_version=1.24 ;;
  esac
  base=elector-local/debian-base:$release
  postgres=elector-local/postgres:$major
  pgbouncer=elector-local/pgbouncer:$pgbouncer_version
  base_packages="postgresql-$major pgbouncer ca-certificates util-linux procps"
  recipes=$work/$release
  if [ ! -d "$recipes" ]; then
    local d f
    for d in base postgres pgbouncer; do
      mkdir -p "$recipes/$d"
      for f in "$here/images/$d"/*; do
        sed -e "s/@DEBIAN_RELEASE@/$release/g" -e "s/@PG_MAJOR@/$major/g" \
          -e "s/@PGBOUNCER_VERSION@/$pgbouncer_version/g" "$f" >"$recipes/$d/${f##*/}"
        if [ -x "$f" ]; then chmod +x "$recipes/$d/${f##*/}"; fi
      done
    done
    if grep -rn '@[A-Z][A-Z_]*@' "$recipes" >&2; then
      log "error: a placeholder of ci/images/ has no value (above)"; exit 1
    fi
  fi
  # The base's recipe: what goes in and the steps that put it there (images/base/rootfs.sh).
  base_recipe=$(recipe_of "$base_packages" "$mirror" "$recipes/base/rootfs.sh")
}
derived_recipe() { recipe_of "$base_recipe" "$1"/* "${@:2}"; } # dir [extra recipe inputs...]
pg_recipe() { # the recipe hash of the current major's base, postgres and pgbouncer images
  recipe_of "$base_recipe" "$(derived_recipe "$recipes/postgres")" \
    "$(derived_recipe "$recipes/pgbouncer")"
}

case ${1:-} in
  --print-recipe-hash)
    if [ ${#majors[@]} -eq 1 ]; then
      use_pg "${majors[0]}"; pg_recipe
    else
      hashes=()
      for m in "${majors[@]}"; do use_pg "$m"; hashes+=("$m:$(pg_recipe)"); done
      recipe_of "${hashes[@]}"
    fi
    exit 0 ;;
  --save | --load)
    [ $# -eq 2 ] || { log "error: $1 needs a directory"; exit 2; }
    prereqs docker
    images=()
    for m in "${majors[@]}"; do use_pg "$m"; images+=("$base" "$postgres" "$pgbouncer"); done
    if [ "$1" = --save ]; then
      mkdir -p "$2"
      if [ ${#images[@]} -eq 3 ]; then
        log "saving ${images[0]}, ${images[1]} and ${images[2]} to $2/images.tar"
      else
        log "saving ${images[*]} to $2/images.tar"
      fi
      docker save -o "$2/images.tar" "${images[@]}"
    elif [ -f "$2/images.tar" ]; then
      log "loading $2/images.tar"
      docker load -q -i "$2/images.tar" >/dev/null
      if [ -n "$pg_explicit" ]; then
        for i in "${images[@]}"; do
          docker image inspect "$i" >/dev/null 2>&1 ||
            log "warning: $i is missing (not in $2/images.tar)"
        done
      fi
    else
      log "no $2/images.tar to load"
    fi
    exit 0 ;;
esac

prereqs docker

# Where debootstrap finds its scripts: the host's, and when they have none for the release
# (an older debootstrap than the release), a copy of them where the release is sid's script,
# as debootstrap's own newer releases do. Prints the DEBOOTSTRAP_DIR to use.
debootstrap_dir() {
  local d=${DEBOOTSTRAP_DIR:-/usr/share/debootstrap} e
  if [ -e "$d/scripts/$release" ]; then printf '%s' "$d"; return; fi
  [ -e "$d/scripts/sid" ] ||
    { log "error: debootstrap has no script for $release (nor sid) in $d/scripts"; return 1; }
  log "debootstrap has no script for $release: using sid's"
  mkdir -p "$work/debootstrap/scripts"
  for e in "$d"/*; do [ "${e##*/}" = scripts ] || ln -sfn "$e" "$work/debootstrap/"; done
  for e in "$d"/scripts/*; do ln -sfn "$e" "$work/debootstrap/scripts/"; done
  ln -sfn "$d/scripts/sid" "$work/debootstrap/scripts/$release"
  printf '%s' "$work/debootstrap"
}

out=/var/tmp/elector-build-images.log logged=''
build_base() {
  if [ "$(current "$base")" = "$base_recipe" ]; then log "$base is up to date"; return; fi
  prereqs root debootstrap
  local dbdir; dbdir=$(debootstrap_dir)
  local rootfs; rootfs=$(mktemp -d /var/tmp/elector-rootfs.XXXXXX)
  chmod 755 "$rootfs" # mktemp makes it 0700; the image's / must be traversable by postgres
  if [ -z "$logged" ]; then : >"$out"; logged=1; fi # one log for every base of this run
  # shellcheck disable=SC2064 # expand now: rootfs is local to this function
  trap "as_root umount -lf '$rootfs/proc' 2>/dev/null || true; as_root rm -rf '$rootfs'; trap - RETURN" RETURN
  log "debootstrap $release from $mirror, then $base_packages (log: $out)"
  # shellcheck disable=SC2086 # the package list is words
  as_root env DEBOOTSTRAP_DIR="$dbdir" \
    bash "$recipes/base/rootfs.sh" "$rootfs" "$mirror" $base_packages >>"$out" 2>&1 || {
    log "error: building the root file system failed, see $out:"; tail -20 "$out" >&2
    if grep -q 'unknown key\|NO_PUBKEY' "$out"; then
      log "hint: the host's Debian archive keyring does not know $release's signing key:" \
        "install a newer debian-archive-keyring"
    fi
    return 1
  }
  # The image names the PgBouncer version: the release must still ship that major.minor.
  local pg_version pgb_version
  # shellcheck disable=SC2016 # dpkg-query's format, not the shell's
  pg_version=$(as_root chroot "$rootfs" dpkg-query -W -f '${Version}' "postgresql-$major")
  # shellcheck disable=SC2016
  pgb_version=$(as_root chroot "$rootfs" dpkg-query -W -f '${Version}' pgbouncer)
  case ${pgb_version#*:} in
    "$pgbouncer_version".*) ;;
    *) log "error: $release ships pgbouncer $pgb_version, not $pgbouncer_version:" \
         "update use_pg in ci/build-images.sh"; return 1 ;;
  esac
  log "importing $base (postgresql-$major $pg_version, pgbouncer $pgb_version)"
  as_root tar -C "$rootfs" -c . |
    docker import --change "LABEL $label=$base_recipe" \
      --change "LABEL org.elector.postgresql=$pg_version" \
      --change "LABEL org.elector.pgbouncer=$pgb_version" - "$base" >/dev/null
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

# The toxiproxy image's recipe: its base, its Dockerfile, and what the binary is built from
# (the sources of harness/toxiproxy and harness/wiretap by relative path and content, the
# workspace's Cargo.toml, the crates it depends on, the compiler's version). An image that has
# it is kept without compiling anything: a clean clone with the image built skips the release
# build (162 s). The crates are `cargo tree`'s, without the checkout's path, so that a change of
# Cargo.lock for another crate of the workspace keeps the image; where cargo cannot list them
# offline (a machine that has fetched no crate yet), all of Cargo.lock counts instead.
toxiproxy_deps() {
  (cd "$root" && cargo tree -q -p toxiproxy-server -e normal,build --prefix none --locked \
    --offline 2>/dev/null) | sed -e 's/ (\*)$//' -e 's/ ([^)]*)$//' | LC_ALL=C sort -u ||
    true
}
toxiproxy_recipe() {
  local src deps
  deps=$(toxiproxy_deps)
  if [ -z "$deps" ]; then deps=$(cat "$root/Cargo.lock"); fi
  src=$(cd "$root" && find harness/toxiproxy/Cargo.toml harness/toxiproxy/src \
    harness/wiretap/Cargo.toml harness/wiretap/src Cargo.toml -type f -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  recipe_of "$base_recipe" "$here/images/toxiproxy/Dockerfile" "$src" "$deps" "$(rustc --version)"
}

build_toxiproxy() {
  prereqs cargo
  local recipe; recipe=$(toxiproxy_recipe)
  if [ "$(current "$toxiproxy")" = "$recipe" ]; then log "$toxiproxy is up to date"; return; fi
  log "building the toxiproxy-server binary"
  (cd "$root" && cargo build -q --release -p toxiproxy-server)
  local ctx; ctx=$(mktemp -d)
  cp "$here/images/toxiproxy/Dockerfile" "$ctx/"
  cp "$root/target/release/toxiproxy-server" "$ctx/"
  log "building $toxiproxy"
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" --label "$label=$recipe" \
    -t "$toxiproxy" "$ctx" >/dev/null 2>/var/tmp/elector-docker-build.log ||
    { log "error: docker build of $toxiproxy failed:"; cat /var/tmp/elector-docker-build.log >&2
      rm -rf "$ctx"; return 1; }
  rm -rf "$ctx"
}

go_major=17 # the Go replica is compiled on this major's base (trixie: Go 1.24, pgx 4.18)
go_out=$root/target/replicas/go
build_go_replica() {
  use_pg "$go_major"
  build_base
  local ctx=$work/go-replica src recipe
  mkdir -p "$ctx"
  cp "$here/images/go-replica/Dockerfile" "$ctx/"
  cp -R "$root/replicas/go" "$ctx/src"
  # The sources by relative path and content (a rename changes the recipe too).
  src=$(cd "$ctx/src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
    sha256sum | cut -c1-16)
  recipe=$(recipe_of "$base_recipe" "$ctx/Dockerfile" "$src")
  if [ -x "$go_out/replica" ] && [ "$(cat "$go_out/replica.recipe" 2>/dev/null)" = "$recipe" ]; then
    log "target/replicas/go/replica is up to date"; return
  fi
  log "compiling the Go replica on $base (target/replicas/go/replica)"
  local image=elector-local/go-replica:build container
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" --label "$label=$recipe" \
    -t "$image" "$ctx" >/dev/null 2>/var/tmp/elector-docker-build.log ||
    { log "error: docker build of the Go replica failed:"; cat /var/tmp/elector-docker-build.log >&2
      return 1; }
  mkdir -p "$go_out"
  rm -f "$go_out/replica.recipe"
  container=$(docker create "$image" /out/replica)
  if ! { docker cp -q "$container:/out/replica" "$go_out/replica" &&
    docker cp -q "$container:/out/go-version" "$go_out/go-version"; }; then
    docker rm -f "$container" >/dev/null; return 1
  fi
  docker rm -f "$container" >/dev/null
  printf '%s\n' "$recipe" >"$go_out/replica.recipe"
}

want=("$@"); [ ${#want[@]} -gt 0 ] || want=(postgres pgbouncer toxiproxy)
pg_wanted='' toxiproxy_wanted='' go_wanted=''
for w in "${want[@]}"; do
  case $w in
    postgres | pgbouncer) pg_wanted=1 ;;
    toxiproxy) toxiproxy_wanted=1 ;;
    go-replica) go_wanted=1 ;;
    *) log "error: unknown image '$w' (expected postgres, pgbouncer, toxiproxy or go-replica)"
       exit 2 ;;
  esac
done
start=$(date +%s)
if [ -n "$pg_wanted" ]; then
  for m in "${majors[@]}"; do
    use_pg "$m"
    build_base
    for w in "${want[@]}"; do
      case $w in
        postgres) build_derived "$postgres" "$recipes/postgres" ;;
        pgbouncer) build_derived "$pgbouncer" "$recipes/pgbouncer" ;;
      esac
    done
  done
fi
if [ -n "$toxiproxy_wanted" ]; then
  use_pg "$toxiproxy_major"
  build_base
  build_toxiproxy
fi
if [ -n "$go_wanted" ]; then build_go_replica; fi
log "images ready in $(( $(date +%s) - start )) s"
