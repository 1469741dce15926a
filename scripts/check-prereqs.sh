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

exec "$(dirname "$0")/check-java.sh" "Spark 4"
