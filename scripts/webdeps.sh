#!/usr/bin/env bash
# Best effort: install the npm packages of the Firefox checks (tests/web/firefox: Puppeteer,
# which drives Debian's firefox-esr over WebDriver BiDi) from its lock file. Never fails the
# build: without npm or the registry the Firefox test skips and says why.
here=$(cd "$(dirname "$0")/.." && pwd)
dir="$here/tests/web/firefox"
command -v npm >/dev/null || { echo "webdeps: no npm; the Firefox web test will skip"; exit 0; }
stamp="$dir/node_modules/.package-lock.json"
if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ]; then exit 0; fi
# --ignore-scripts: nothing is downloaded besides the packages (no browser: firefox-esr is
# Debian's)
timeout 600 npm ci --prefix "$dir" --no-audit --no-fund --ignore-scripts \
  >/tmp/herder-webdeps.log 2>&1 \
  || echo "webdeps: npm ci failed (see /tmp/herder-webdeps.log); the Firefox web test will skip"
exit 0
