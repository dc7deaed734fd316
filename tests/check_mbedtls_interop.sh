#!/usr/bin/env bash
# A board runtime built on mbedTLS (scripts/build-device.sh native: the board builds'
# TLS, here for this machine) against the host's tracker on OpenSSL, over loopback:
# with a token it registers over TLS 1.2 (the token proof bound to the session), with
# --tls-ca it accepts the tracker's pinned certificate and refuses another one naming
# why, and with --no-tls on both sides it registers with frame MACs (HMAC from mbedTLS).
#   tests/check_mbedtls_interop.sh KESTREL_BIN SOURCE_DIR
# Exits 77 (skipped) when the native board build is missing.
set -euo pipefail
kestrel="$1"
device="$2/build-device-native/kestrel-device"
if [ ! -x "$device" ]; then
  echo "no $device (scripts/build-device.sh native): skipped"
  exit 77
fi
dir=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
cd "$dir"
echo "mbedtls-interop-secret-0123456789" > token && chmod 600 token
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=kestrel-tracker \
  -keyout tracker.key -out tracker.pem 2> /dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=other \
  -keyout other.key -out other.pem 2> /dev/null

# A free port from the kernel, then the tracker on it (retried if another took it).
start_tracker() {
  local log="$1" try port
  shift
  for try in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$kestrel" tracker --host 127.0.0.1 --port "$port" "$@" > "$log" 2>&1 &
    pids+=($!)
    sleep 0.5
    if kill -0 "${pids[-1]}" 2> /dev/null; then
      echo "$port"
      return 0
    fi
  done
  echo "cannot start a tracker: $(cat "$log")" >&2
  return 1
}
# Waits until `kestrel query` lists the device name $2 (its other arguments: $3...).
wait_registered() {
  local port="$1" name="$2" i
  shift 2
  for i in $(seq 1 50); do
    if "$kestrel" query --tracker "127.0.0.1:$port" "$@" 2> /dev/null | grep -q -- "$name"; then return 0; fi
    sleep 0.2
  done
  return 1
}
status=0
fail() {
  echo "FAIL: $*"
  status=1
}

port=$(start_tracker tracker.log --token-file token --tls-cert tracker.pem --tls-key tracker.key)
"$device" --tracker "127.0.0.1:$port" --key mb --name mb-tls --token-file token > tls.log 2>&1 &
pids+=($!)
"$device" --tracker "127.0.0.1:$port" --key mb --name mb-pinned --token-file token --tls-ca tracker.pem \
  > pinned.log 2>&1 &
pids+=($!)
"$device" --tracker "127.0.0.1:$port" --key mb --name mb-misled --token-file token --tls-ca other.pem \
  > misled.log 2>&1 &
pids+=($!)
wait_registered "$port" mb-tls --token-file token || fail "the mbedTLS runtime did not register over TLS: $(tail -3 tls.log)"
wait_registered "$port" mb-pinned --token-file token ||
  fail "the mbedTLS runtime with --tls-ca did not register: $(tail -3 pinned.log)"
for i in $(seq 1 50); do
  grep -q "presented a certificate that --tls-ca does not vouch for" misled.log && break
  sleep 0.2
done
grep -q "presented a certificate that --tls-ca does not vouch for" misled.log ||
  fail "a tracker certificate --tls-ca does not vouch for was not refused: $(tail -3 misled.log)"
if "$kestrel" query --tracker "127.0.0.1:$port" --token-file token 2> /dev/null | grep -q mb-misled; then
  fail "the runtime that was given another CA registered"
fi
# Registering proves the exporters agree: with TLS both proofs cover the session's
# exported key, so a different one on either side reads as a wrong token.
if grep -q "wrong token" tracker.log; then fail "a token proof failed: $(grep "wrong token" tracker.log | head -1)"; fi

plain=$(start_tracker plain.log --token-file token --no-tls)
"$device" --tracker "127.0.0.1:$plain" --key mb --name mb-macs --token-file token --no-tls > macs.log 2>&1 &
pids+=($!)
wait_registered "$plain" mb-macs --token-file token --no-tls ||
  fail "the mbedTLS runtime did not register with frame MACs: $(tail -3 macs.log)"

[ "$status" -eq 0 ] && echo "mbedTLS runtime and OpenSSL tracker: TLS, --tls-ca (right and wrong) and frame MACs all work"
exit $status
