#!/usr/bin/env bash
# The browser tests drive a headless Chromium; Playwright cannot download one here, so they use
# the system's (/usr/bin/chromium, or $KAFKA_BATCH_CHROMIUM). As root on Debian/Ubuntu it is
# installed with apt-get; otherwise one line says what to install, and the check fails.
set -u
chromium=${KAFKA_BATCH_CHROMIUM:-/usr/bin/chromium}
if [ -x "$chromium" ]; then exit 0; fi
if [ -z "${KAFKA_BATCH_CHROMIUM:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing Chromium for the browser tests: apt-get update && apt-get install -y chromium"
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null && [ -x "$chromium" ]; then
    exit 0
  fi
  echo "error: apt-get install chromium failed; install Chromium and rerun (or set KAFKA_BATCH_CHROMIUM=/path/to/chromium)" >&2
  exit 1
fi
echo "error: Chromium not found at $chromium (the browser tests need it): install it (Debian/Ubuntu: sudo apt-get install chromium) or set KAFKA_BATCH_CHROMIUM=/path/to/chromium" >&2
exit 1
