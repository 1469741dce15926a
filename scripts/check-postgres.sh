#!/usr/bin/env bash
# The change-data-capture tests and the demo run a PostgreSQL server as a plain process
# (provider/kafka_batch_provider/dev/postgres.py): Debian's package, /usr/lib/postgresql/<n>/bin, or
# $KAFKA_BATCH_POSTGRES_BIN. As root on Debian/Ubuntu it is installed with apt-get (only the
# binaries are used: the package's own cluster is never started); otherwise one line says what to
# install, and the check fails.
set -u
found() {
  if [ -n "${KAFKA_BATCH_POSTGRES_BIN:-}" ]; then [ -x "$KAFKA_BATCH_POSTGRES_BIN/postgres" ]; return; fi
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1
}
if found; then exit 0; fi
if [ -z "${KAFKA_BATCH_POSTGRES_BIN:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing PostgreSQL for the change-data-capture tests: apt-get update && apt-get install -y postgresql"
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null && found; then
    exit 0
  fi
  echo "error: apt-get install postgresql failed; install PostgreSQL 13+ and rerun (or set KAFKA_BATCH_POSTGRES_BIN=/path/to/its/bin)" >&2
  exit 1
fi
echo "error: PostgreSQL not found (/usr/lib/postgresql/*/bin): install it (Debian/Ubuntu: sudo apt-get install postgresql) or set KAFKA_BATCH_POSTGRES_BIN=/path/to/its/bin" >&2
exit 1
