#!/usr/bin/env bash
# Runs tests/dashboard/test_dashboard.py (the dashboard in headless Chromium, /metrics
# parsed, the token's guard) against the given binaries:
#   run_dashboard_test.sh KESTREL KESTREL_DEVICE [unittest test names...]
# with the test Python: $KESTREL_PYTHON, $KESTREL_VENV's or the source tree's .venv
# (scripts/setup-python.sh), else python3. Exits 77 (skipped) when that Python cannot
# import selenium and prometheus_client, or when Chromium or chromedriver is missing
# ($KESTREL_CHROMIUM, $KESTREL_CHROMEDRIVER; Debian's by default); under
# KESTREL_REQUIRE_PYTHON=1 (CI) each of those is a failure instead.
root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ "$#" -lt 2 ]; then echo "usage: $0 KESTREL KESTREL_DEVICE [TEST...]" >&2; exit 2; fi
kestrel="$1"; device="$2"; shift 2

skip() {
  if [ "${KESTREL_REQUIRE_PYTHON:-}" = "1" ]; then echo "failed: $*"; exit 1; fi
  echo "skipped: $*"; exit 77
}

python="${KESTREL_PYTHON:-}"
[ -z "$python" ] && [ -n "${KESTREL_VENV:-}" ] && [ -x "$KESTREL_VENV/bin/python" ] && python="$KESTREL_VENV/bin/python"
[ -z "$python" ] && [ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
[ -z "$python" ] && python="$(command -v python3 || true)"
[ -n "$python" ] || skip "no python3"
"$python" -c "import selenium, prometheus_client" > /dev/null 2>&1 \
  || skip "$python cannot import selenium, prometheus_client (run scripts/setup-python.sh or set KESTREL_PYTHON)"
chromium="${KESTREL_CHROMIUM:-/usr/bin/chromium}"
driver="${KESTREL_CHROMEDRIVER:-/usr/bin/chromedriver}"
[ -x "$chromium" ] || skip "no Chromium at $chromium (Debian: apt-get install chromium; see scripts/setup.sh)"
[ -x "$driver" ] || skip "no chromedriver at $driver (Debian: apt-get install chromium-driver; see scripts/setup.sh)"

export PYTHONDONTWRITEBYTECODE=1 KESTREL_BIN="$kestrel" KESTREL_DEVICE_BIN="$device" KESTREL_CHROMIUM="$chromium" KESTREL_CHROMEDRIVER="$driver"
cd "$root/tests/dashboard" && exec "$python" -m unittest -v "${@:-test_dashboard}"
