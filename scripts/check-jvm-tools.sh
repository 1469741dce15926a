#!/usr/bin/env bash
# Checks what `make jvm-tools` needs and pip cannot install: Maven (mvn) to fetch the pinned jars of
# jvm/*/pom.xml from Maven Central, and Java 17+ to run them (Apache Kafka 4 needs 17 for its broker).
# Prints one clear line and exits 1 when something is missing.
set -u

if ! command -v mvn >/dev/null 2>&1; then
  echo "error: mvn not found: Apache Kafka's jars (jvm/kafka/pom.xml) come from Maven Central through Maven 3.8+; install it (Debian: apt-get install maven)" >&2
  exit 1
fi
java_bin=java
if [ -n "${JAVA_HOME:-}" ]; then java_bin="$JAVA_HOME/bin/java"; fi
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "error: Java not found (Apache Kafka 4 and Spark 4 need Java 17+); install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME" >&2
  exit 1
fi
version_line=$("$java_bin" -version 2>&1 | head -n 1)
major=$(printf '%s\n' "$version_line" | sed -E 's/.*version "([0-9]+)(\.([0-9]+))?.*/\1/')
if [ "$major" = "1" ]; then major=8; fi
if ! [ "$major" -ge 17 ] 2>/dev/null; then
  echo "error: Apache Kafka 4 needs Java 17+, found: $version_line (install openjdk-17 or set JAVA_HOME)" >&2
  exit 1
fi
exit 0
