#!/usr/bin/env bash
# Checks for Java 17+ (JAVA_HOME's, else the one on PATH), for check-prereqs.sh and check-jvm-tools.sh.
# $1 says who needs it, e.g. "Spark 4". Prints one clear line and exits 1 when it is missing or older.
set -u
needs="$1"

java_bin=java
if [ -n "${JAVA_HOME:-}" ]; then java_bin="$JAVA_HOME/bin/java"; fi
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "error: Java not found ($needs needs Java 17+); install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME" >&2
  exit 1
fi
version_line=$("$java_bin" -version 2>&1 | head -n 1)
major=$(printf '%s\n' "$version_line" | sed -E 's/.*version "([0-9]+)(\.([0-9]+))?.*/\1/')
if [ "$major" = "1" ]; then major=8; fi
if ! [ "$major" -ge 17 ] 2>/dev/null; then
  echo "error: $needs needs Java 17+, found: $version_line (install openjdk-17 or set JAVA_HOME)" >&2
  exit 1
fi
exit 0
