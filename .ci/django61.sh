#!/usr/bin/env bash
# `make test-django61`: the whole test suite again, on Django 6.1 and Python 3.13.
#
# This machine's Python may be older than Django 6 needs (3.12+), so the suite runs
# in a Debian 13 (trixie) root built with mmdebstrap from the Debian mirror this
# machine's apt already uses. The root is cached (DJANGO61_CACHE, /var/cache/...),
# keyed by its package list, and rebuilt when missing; its virtualenv (/opt/venv)
# installs requirements/dev.txt and docs.txt with requirements/constraints-django61.txt
# through the Makefile's own rules. The checkout is bind-mounted at /src, and the
# suite runs there with pytest.ini as `make test` runs it, against this machine's
# PostgreSQL and Redis on 127.0.0.1 (TEST_DATABASE_NAME, TEST_REDIS_URL and the
# other TEST_* variables pass through). Arguments are passed to pytest.
#
# Needs root (mmdebstrap, mount, chroot). docs/installation.rst describes it.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SUITE=trixie
# What the suite needs besides the virtualenv: git and make (tests run `make demo`),
# redis-server (tests/test_faults.py starts its own), chromium and a font (the
# browser tests), gcc and python3-dev (a dependency without a wheel builds).
PACKAGES=(
  python3 python3-venv python3-pip python3-dev gcc libc6-dev libpq5 ca-certificates
  chromium fonts-dejavu-core git make redis-server tzdata
)
CACHE=${DJANGO61_CACHE:-/var/cache/assistant-django61}
KEY=$(printf '%s\n' "$SUITE" "${PACKAGES[@]}" | sha256sum | cut -c1-16)
ROOT=$CACHE/root-$KEY
VENV=/opt/venv
CONSTRAINTS=requirements/constraints-django61.txt

say() { printf 'test-django61: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }
seconds() { date +%s; }

if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || fail "needs root (mmdebstrap, mount, chroot), and sudo is missing"
  exec sudo --preserve-env bash "$0" "$@"
fi

# --- the mirror: the first Debian mirror of this machine's apt sources that serves trixie

apt_source_uris() {
  local file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$file" ] || continue
    # deb [options] URI suite components...
    sed -e 's/#.*//' -e 's/\[[^]]*\]//g' "$file" | awk '$1 == "deb" { print $2 }'
  done
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    # deb822 stanzas: Types, URIs, Enabled; a blank line ends one.
    awk '
      function flush() { if (types ~ /(^| )deb( |$)/ && enabled != "no") print uris; types = ""; uris = ""; enabled = "" }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      { field = tolower($1); sub(/:$/, "", field); $1 = ""; sub(/^ +/, "") }
      field == "types" { types = $0 } field == "uris" { uris = $0 } field == "enabled" { enabled = tolower($0) }
      END { flush() }
    ' "$file" | tr ' ' '\n'
  done
}

fetch_ok() {  # URL: whether it can be downloaded (curl or wget, as this machine has them)
  if command -v curl >/dev/null; then
    curl -fsSL --max-time 30 -o /dev/null "$1" 2>/dev/null
  else
    wget -q -T 30 -O /dev/null "$1" 2>/dev/null
  fi
}

find_mirror() {
  local uri tried=()
  for uri in $(apt_source_uris | awk 'NF && !seen[$0]++'); do
    case "$uri" in http://* | https://*) ;; *) continue ;; esac
    uri=${uri%/}
    tried+=("$uri")
    if fetch_ok "$uri/dists/$SUITE/InRelease" || fetch_ok "$uri/dists/$SUITE/Release"; then
      echo "$uri"
      return 0
    fi
  done
  fail "no Debian mirror serving $SUITE is reachable from this machine's apt sources (tried: ${tried[*]:-none}); cannot build the Django 6.1 root"
}

# --- mounts, undone on every exit

MOUNTED=()
BUILDING=""
mounted_under() {  # mount points at or under $1, deepest first
  awk -v root="$1" '$5 == root || index($5, root "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}
unmount_all_under() {
  local point
  for point in $(mounted_under "$1"); do
    umount "$point" 2>/dev/null || umount -l "$point"
  done
}
cleanup() {
  local status=$? pid
  # Processes the run left inside the root (a server a test started): ended first,
  # or the mounts would stay busy.
  if [ -d "$ROOT" ]; then
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
      [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$ROOT" ] && kill -9 "$pid" 2>/dev/null || true
    done
  fi
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2>/dev/null || umount -l "${MOUNTED[i]}" 2>/dev/null || true
  done
  if [ -n "$BUILDING" ]; then
    unmount_all_under "$BUILDING"
    rm -rf --one-file-system "$BUILDING"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bind() {  # SOURCE TARGET [ro]
  mkdir -p "$2"
  mount --bind "$1" "$2"
  MOUNTED+=("$2")
  if [ "${3:-}" = ro ]; then
    mount -o remount,bind,ro "$2"
  fi
}

mkdir -p "$CACHE"
# One run at a time per cache: runs share the root and its virtualenv.
exec 9>"$CACHE/lock"
flock -n 9 || { say "waiting for another run to finish with $CACHE"; flock 9; }
# A run killed outright (SIGKILL) cannot unmount: its mounts are undone here.
[ -d "$ROOT" ] && unmount_all_under "$ROOT"

# --- the root

started=$(seconds)
if [ -x "$ROOT/usr/bin/python3" ]; then
  say "root $ROOT (cached)"
else
  command -v mmdebstrap >/dev/null || apt-get install -y -q mmdebstrap >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q mmdebstrap >/dev/null; } \
    || fail "mmdebstrap is missing and apt-get could not install it"
  MIRROR=$(find_mirror)
  say "building $ROOT from $MIRROR ($SUITE)"
  BUILDING=$ROOT.building
  unmount_all_under "$BUILDING"
  rm -rf --one-file-system "$BUILDING"
  mmdebstrap --quiet --variant=apt --include="$(IFS=,; echo "${PACKAGES[*]}")" \
    "$SUITE" "$BUILDING" "deb $MIRROR $SUITE main" \
    || fail "mmdebstrap could not build the $SUITE root from $MIRROR"
  mv "$BUILDING" "$ROOT"
  BUILDING=""
  # Roots of an older package list.
  for old in "$CACHE"/root-*; do
    [ "$old" = "$ROOT" ] || [ ! -d "$old" ] || [ -n "$(mounted_under "$old")" ] \
      || rm -rf --one-file-system "$old"
  done
fi
say "root ready in $(($(seconds) - started)) s: $(chroot "$ROOT" python3 --version)"

# --- this machine's network view: resolver, hosts, pip configuration, certificates

cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf.new" && mv "$ROOT/etc/resolv.conf.new" "$ROOT/etc/resolv.conf"
cp -L /etc/hosts "$ROOT/etc/hosts"
rm -rf "$ROOT/etc/pip.conf" "$ROOT/etc/xdg/pip" "$ROOT/root/.config/pip"
[ -f /etc/pip.conf ] && cp -L /etc/pip.conf "$ROOT/etc/pip.conf"
[ -d /etc/xdg/pip ] && mkdir -p "$ROOT/etc/xdg" && cp -rL /etc/xdg/pip "$ROOT/etc/xdg/pip"
HOME_PIP=${SUDO_USER:+$(getent passwd "$SUDO_USER" | cut -d: -f6)}
HOME_PIP=${HOME_PIP:-$HOME}/.config/pip
[ -d "$HOME_PIP" ] && mkdir -p "$ROOT/root/.config" && cp -rL "$HOME_PIP" "$ROOT/root/.config/pip"
# This machine's certificate bundle (a proxy's own authority included) replaces the root's.
for bundle in /etc/ssl/certs/ca-certificates.crt ${PIP_CERT:-} ${SSL_CERT_FILE:-} \
  ${REQUESTS_CA_BUNDLE:-} ${CURL_CA_BUNDLE:-}; do
  [ -f "$bundle" ] && mkdir -p "$ROOT$(dirname "$bundle")" && cp -L "$bundle" "$ROOT$bundle"
done

# --- mounts: the kernel's views, the checkout, and the local package indexes pip names

bind /proc "$ROOT/proc"
bind /dev "$ROOT/dev"
bind /dev/shm "$ROOT/dev/shm"
bind "$REPO" "$ROOT/src"
# Local directories the pip configuration names (find-links, a file:// index: the
# directory above its simple/, where its pages' relative links lead), read-only at the
# same paths (never over a directory the root has of its own).
declare -A BOUND=()
for word in $(cat /etc/pip.conf /etc/xdg/pip/*.conf "$HOME_PIP"/*.conf 2>/dev/null) \
  $(env | awk -F= '/^PIP_/ { $1 = ""; print }'); do
  path=${word#file://}
  path=${path%/}
  case "$path" in /?*/simple) path=${path%/simple} ;; /?*) ;; *) continue ;; esac
  [ -d "$path" ] && [ -z "${BOUND[$path]:-}" ] || continue
  [ -z "$(ls -A "$ROOT$path" 2>/dev/null)" ] || continue
  bind "$path" "$ROOT$path" ro
  BOUND[$path]=1
done

# The environment inside: a clean one, plus the test run's variables, pip's and the proxy's.
INSIDE=(
  HOME=/root LANG=C.UTF-8 PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  VENV=$VENV CONSTRAINTS=$CONSTRAINTS PYTHON=python3 TERM=${TERM:-dumb}
)
while IFS= read -r name; do
  INSIDE+=("$name=${!name}")
done < <(compgen -e | grep -E '^(TEST_|PIP_|CI$|SSL_CERT_|REQUESTS_CA_BUNDLE$|CURL_CA_BUNDLE$|(http|https|no|HTTP|HTTPS|NO)_(proxy|PROXY)$)' || true)
inside() { chroot "$ROOT" /usr/bin/env -i "${INSIDE[@]}" bash -c "cd /src && $1"; }

# --- the virtualenv, by the Makefile's rules (stamps in /opt/venv: reinstalls on a change)

started=$(seconds)
inside "make --no-print-directory $VENV/.dev $VENV/.docs" \
  || fail "the virtualenv could not install requirements/dev.txt and docs.txt with $CONSTRAINTS"
say "virtualenv ready in $(($(seconds) - started)) s: $(inside "python -c 'import django, sys; print(\"Django\", django.__version__, \"on Python\", sys.version.split()[0])'")"

# --- the suite

started=$(seconds)
status=0
ARGS=""
[ $# -eq 0 ] || ARGS=$(printf ' %q' "$@")
inside "DJANGO_SETTINGS_MODULE=config.test_settings python manage.py check_services && pytest$ARGS" \
  || status=$?
say "suite finished in $(($(seconds) - started)) s (exit $status)"
exit "$status"
