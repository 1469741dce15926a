#!/usr/bin/env bash
# Checks what pip cannot install: a Python >= 3.11 to build the venv (pyspark 4.3, numpy 2.4 and the pinned providers need it) and Java 17+ for Spark 4.
# Prints one clear line and exits 1 when something is missing.
set -u
python=${1:-python3}

if ! command -v "$python" >/dev/null 2>&1; then
  echo "error: $python not found; install Python 3.11-3.13 (or run: make PYTHON=/path/to/python3)" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 13) else 1)'; then
  echo "error: $("$python" --version 2>&1) is not supported; the pinned packages (constraints.txt) need Python 3.11-3.13 (make PYTHON=...)" >&2
  exit 1
fi
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "error: $python has no venv/ensurepip module; install it (Debian: apt-get install python3-venv)" >&2
  exit 1
fi

exec "$(dirname "$0")/check-java.sh" "Spark 4"
