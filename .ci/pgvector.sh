#!/usr/bin/env bash
# Build and install pgvector into this machine's PostgreSQL when it is missing
# (`make pgvector`, which `make test` runs first). A no-op when the server
# already lists the extension as available.
#
# Debian 12's PostgreSQL 15 has no pgvector package; Debian 13's source
# package builds against it. The source comes through a PRIVATE apt
# configuration in a temporary directory (its own source list and package
# lists): the machine's own sources and lists are never touched.
# Needs root (apt-get install, make install); see docs/development.rst.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
PGHOST=${PGHOST:-127.0.0.1}
PGUSER=${PGUSER:-postgres}
export PGHOST PGUSER

available() {
  [ "$(psql -X -Atc "SELECT 1 FROM pg_available_extensions WHERE name='vector'" 2>/dev/null)" = 1 ]
}

if available; then
  echo "pgvector: already available"
  exit 0
fi

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

# The Debian mirror this machine's apt already uses (deb822 or one-line form).
mirror=$(grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+)https?://[^[:space:]]+/debian/?([[:space:]]|$)' \
  /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list 2>/dev/null \
  | grep -oE 'https?://[^[:space:]]+' | head -n 1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

start=$SECONDS
$SUDO apt-get install -y -q "postgresql-server-dev-$PG_MAJOR" >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/parts"
# apt downloads as its sandbox user when that user may write the target.
if id _apt >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  chmod 755 "$work" && chown _apt "$work" "$work/lists/partial"
fi
echo "deb-src $mirror trixie main" >"$work/sources.list"
private=(
  -o "Dir::Etc::SourceList=$work/sources.list"
  -o "Dir::Etc::SourceParts=$work/parts"
  -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache::pkgcache=$work/pkgcache.bin"
  -o "Dir::Cache::srcpkgcache=$work/srcpkgcache.bin"
  -o "APT::Get::List-Cleanup=0"
)
apt-get "${private[@]}" update -q >/dev/null
(cd "$work" && apt-get "${private[@]}" source --download-only pgvector >/dev/null)
dsc=$(ls "$work"/pgvector_*.dsc)
(cd "$work" && dpkg-source --no-check -x "$dsc" src >/dev/null)

make -C "$work/src" -s PG_CONFIG="$PG_CONFIG" >/dev/null
$SUDO make -C "$work/src" -s PG_CONFIG="$PG_CONFIG" install >/dev/null

if ! available; then
  echo "pgvector: built and installed, but the server at $PGHOST does not list it" >&2
  exit 1
fi
echo "pgvector: $(basename "$dsc" .dsc) built and installed in $((SECONDS - start)) s"
