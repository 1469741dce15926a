#!/usr/bin/env bash
# The Debian packages that the tests and the demo run as plain processes, checked and, as root on
# Debian/Ubuntu, installed with ONE apt-get for everything missing (one `apt-get update`, one dpkg
# lock: the Makefile runs this beside the venv, Maven and npm installs). Otherwise one line per
# missing package says what to install, and the check fails.
#
#   chromium     the browser tests' headless Chromium: /usr/bin/chromium, or $KAFKA_BATCH_CHROMIUM
#   postgresql   the change-data-capture source (dev/postgres.py; only the binaries are used, the
#                package's own cluster is never started): /usr/lib/postgresql/<n>/bin, or
#                $KAFKA_BATCH_POSTGRES_BIN
#   mariadb-server  MariaDB, the server of the MariaDB/MySQL output (issue 50; installed with the
#                rest so the set-up's time already includes it; the package's own server is never
#                started): /usr/sbin/mariadbd, or $KAFKA_BATCH_MARIADB_BIN
#   librdkafka-dev  librdkafka's C declarations, which the native reader (native/, issue 48) compiles
#                against (it links the librdkafka of confluent-kafka's wheel): /usr/include/librdkafka/rdkafka.h
#   kcat         librdkafka's command-line consumer, the native reader's baseline in `make bench`
#
# Usage: scripts/debian-packages.sh chromium postgresql mariadb-server librdkafka-dev kcat
set -u

found() {
  case "$1" in
    chromium) [ -x "${KAFKA_BATCH_CHROMIUM:-/usr/bin/chromium}" ] ;;
    postgresql)
      if [ -n "${KAFKA_BATCH_POSTGRES_BIN:-}" ]; then [ -x "$KAFKA_BATCH_POSTGRES_BIN/postgres" ]; return; fi
      ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 ;;
    mariadb-server) [ -x "${KAFKA_BATCH_MARIADB_BIN:-/usr/sbin}/mariadbd" ] ;;
    librdkafka-dev) [ -f /usr/include/librdkafka/rdkafka.h ] ;;
    kcat) command -v kcat >/dev/null ;;
    *) echo "error: scripts/debian-packages.sh knows no package '$1'" >&2; exit 2 ;;
  esac
}

# Set when the user points at their own copy: then nothing is installed for it.
override() {
  case "$1" in
    chromium) printf '%s' "${KAFKA_BATCH_CHROMIUM:-}" ;;
    postgresql) printf '%s' "${KAFKA_BATCH_POSTGRES_BIN:-}" ;;
    mariadb-server) printf '%s' "${KAFKA_BATCH_MARIADB_BIN:-}" ;;
  esac
}

advice() {
  case "$1" in
    chromium) echo "error: Chromium not found at ${KAFKA_BATCH_CHROMIUM:-/usr/bin/chromium} (the browser tests need it): install it (Debian/Ubuntu: sudo apt-get install chromium) or set KAFKA_BATCH_CHROMIUM=/path/to/chromium" ;;
    postgresql) echo "error: PostgreSQL not found (${KAFKA_BATCH_POSTGRES_BIN:-/usr/lib/postgresql/*/bin}): install it (Debian/Ubuntu: sudo apt-get install postgresql) or set KAFKA_BATCH_POSTGRES_BIN=/path/to/its/bin" ;;
    librdkafka-dev) echo "error: /usr/include/librdkafka/rdkafka.h not found (the native reader compiles against it): install it (Debian/Ubuntu: sudo apt-get install librdkafka-dev)" ;;
    kcat) echo "error: kcat not found (make bench's baseline of the native reader): install it (Debian/Ubuntu: sudo apt-get install kcat)" ;;
    mariadb-server) echo "error: MariaDB not found (${KAFKA_BATCH_MARIADB_BIN:-/usr/sbin}/mariadbd): install it (Debian/Ubuntu: sudo apt-get install mariadb-server) or set KAFKA_BATCH_MARIADB_BIN=/path/to/the/folder/of/mariadbd" ;;
  esac
}

missing=()
for need in "$@"; do
  found "$need" || missing+=("$need")
done
[ ${#missing[@]} -eq 0 ] && exit 0

installable=()
for need in "${missing[@]}"; do
  [ -z "$(override "$need")" ] && installable+=("$need")
done
if [ ${#installable[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing ${installable[*]} (Debian packages) for the tests and the demo: apt-get install -y ${installable[*]}"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${installable[@]}" >/dev/null; }; then
    echo "error: apt-get install ${installable[*]} failed; install them (or point the KAFKA_BATCH_* variables of scripts/debian-packages.sh at your copies) and rerun" >&2
    exit 1
  fi
fi

status=0
for need in "${missing[@]}"; do
  if ! found "$need"; then
    advice "$need" >&2
    status=1
  fi
done
exit $status
