#!/usr/bin/env bash
# Checks what `make jvm-tools` needs and pip cannot install: Maven (mvn) to fetch the pinned jars of
# jvm/*/pom.xml from Maven Central, and Java 17+ to run them (Apache Kafka 4 needs 17 for its broker).
# Prints one clear line and exits 1 when something is missing.
set -u

if ! command -v mvn >/dev/null 2>&1; then
  echo "error: mvn not found: Apache Kafka's jars (jvm/kafka/pom.xml) come from Maven Central through Maven 3.8+; install it (Debian: apt-get install maven)" >&2
  exit 1
fi
exec "$(dirname "$0")/check-java.sh" "Apache Kafka 4"
