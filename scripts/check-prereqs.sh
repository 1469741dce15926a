#!/usr/bin/env bash
# Checks what pip cannot install: a Python >= 3.10 to build the venv and Java 17+ for Spark 4.
# Prints one clear line and exits 1 when something is missing.
set -u
python=${1:-python3}

if ! command -v "$python" >/dev/null 2>&1; then
  echo "error: $python not found; install Python 3.10-3.13 (or run: make PYTHON=/path/to/python3)" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)'; then
  echo "error: $("$python" --version 2>&1) is not supported; Airflow 3 needs Python 3.10-3.13 (make PYTHON=...)" >&2
  exit 1
fi
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "error: $python has no venv/ensurepip module; install it (Debian: apt-get install python3-venv)" >&2
  exit 1
fi

java_bin=java
if [ -n "${JAVA_HOME:-}" ]; then java_bin="$JAVA_HOME/bin/java"; fi
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "error: Java not found (Spark 4 needs Java 17+); install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME" >&2
  exit 1
fi
version_line=$("$java_bin" -version 2>&1 | head -n 1)
major=$(printf '%s\n' "$version_line" | sed -E 's/.*version "([0-9]+)(\.([0-9]+))?.*/\1/')
if [ "$major" = "1" ]; then major=8; fi
if ! [ "$major" -ge 17 ] 2>/dev/null; then
  echo "error: Spark 4 needs Java 17+, found: $version_line (install openjdk-17 or set JAVA_HOME)" >&2
  exit 1
fi
exit 0
