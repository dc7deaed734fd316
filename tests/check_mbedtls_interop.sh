#!/usr/bin/env bash
# A board runtime built on mbedTLS (scripts/build-device.sh native: the board builds'
# TLS, here for this machine) against the host's tracker on OpenSSL, over loopback:
# with a token it registers over TLS 1.2 (the token proof bound to the session), with
# --tls-ca it accepts the tracker's pinned certificate and refuses another one naming
# why, and with --no-tls on both sides it registers with frame MACs (HMAC from mbedTLS).
# The native build links the boards' client-only mbedTLS (scripts/build-mbedtls.sh), so
# this runs the boards' TLS configuration; it also checks what the runtime refuses.
#   tests/check_mbedtls_interop.sh KESTREL_BIN SOURCE_DIR
# Exits 77 (skipped) when the native board build is missing.
set -euo pipefail
kestrel="$1"
device="$2/build-device-native/kestrel-device"
if [ ! -x "$device" ]; then
  echo "no $device (scripts/build-device.sh native): skipped"
  exit 77
fi
# It must be the boards' mbedTLS (scripts/build-mbedtls.sh), not the system's.
if ! grep -q '^KESTREL_MBEDTLS_PREFIX:PATH=/' "$2/build-device-native/CMakeCache.txt"; then
  echo "FAIL: $device is not linked with the boards' mbedTLS (scripts/build-mbedtls.sh): rebuild it" \
    "with scripts/build-device.sh native"
  exit 1
fi
dir=$(mktemp -d)
pids=()
cleanup() {
  local pid
  # Trackers are started inside $(start_tracker ...), a subshell: their pids are in a file.
  if [ -f "$dir/tracker-pids" ]; then
    while read -r pid; do kill "$pid" 2> /dev/null || true; done < "$dir/tracker-pids"
  fi
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
    echo "$!" >> "$dir/tracker-pids"
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

# The runtime's terms, against a TLS 1.2 server (Python's ssl on OpenSSL) that offers one
# thing each time: the terms of docs/security.md (ECDSA and RSA certificates, AES-128-GCM,
# AES-256-GCM-SHA384, ChaCha20-Poly1305; P-256, P-384, X25519) get a session the runtime
# goes on with; a CBC suite, a group the runtime does not offer (P-521) or a session without the
# extended master secret is refused (the handshake fails, or the runtime drops the
# session before sending anything in it).
cat > server.py << 'EOF_PY'
import socket, ssl, sys
case = sys.argv[1]
# case: (certificate, the one cipher suite offered, the one ECDHE group offered or None)
offers = {
    "ok": ("tracker", "ECDHE-ECDSA-AES128-GCM-SHA256", None),
    "ok-aes256-p384": ("tracker", "ECDHE-ECDSA-AES256-GCM-SHA384", "secp384r1"),
    "ok-chacha-x25519": ("tracker", "ECDHE-ECDSA-CHACHA20-POLY1305", "X25519"),
    "ok-rsa": ("rsa", "ECDHE-RSA-AES128-GCM-SHA256", "prime256v1"),
    "cbc": ("tracker", "ECDHE-ECDSA-AES128-SHA256", None),
    "p521": ("tracker", "ECDHE-ECDSA-AES128-GCM-SHA256", "secp521r1"),
    "no-ems": ("tracker", "ECDHE-ECDSA-AES128-GCM-SHA256", None),
}
cert, suite, group = offers[case]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert + ".pem", cert + ".key")
ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
ctx.set_ciphers(suite)
if group:
    ctx.set_ecdh_curve(group)
if case == "no-ems":
    ctx.options |= 1  # SSL_OP_NO_EXTENDED_MASTER_SECRET (OpenSSL 3)
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
listener.settimeout(20)
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
conn.settimeout(5)
try:
    tls = ctx.wrap_socket(conn, server_side=True)
except (ssl.SSLError, OSError) as e:
    print("refused:", e, flush=True)
    sys.exit(0)
try:
    data = tls.recv(1)
    print(("kept " if data else "dropped ") + tls.cipher()[0], flush=True)
except socket.timeout:
    print("kept " + tls.cipher()[0], flush=True)
except (ssl.SSLError, OSError) as e:
    print("dropped:", e, flush=True)
EOF_PY
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=kestrel-tracker -keyout rsa.key -out rsa.pem 2> /dev/null
for offer in ok ok-aes256-p384 ok-chacha-x25519 ok-rsa cbc p521 no-ems; do
  python3 server.py "$offer" > "server-$offer.log" 2>&1 &
  server=$!
  for i in $(seq 1 50); do [ -s "server-$offer.log" ] && break; sleep 0.1; done
  sport=$(head -1 "server-$offer.log")
  "$device" --tracker "127.0.0.1:$sport" --key mb --name "mb-$offer" --token-file token > "device-$offer.log" 2>&1 &
  pids+=($!)
  wait "$server" || true
  result=$(sed -n 2p "server-$offer.log")
  case "$offer:$result" in
    ok*:kept*) ;;
    ok*) fail "a TLS 1.2 server offering $offer did not get a session: ${result:-nothing}; $(tail -2 "device-$offer.log")" ;;
    *:refused* | *:dropped*)
      for i in $(seq 1 20); do grep -q "TLS handshake with the tracker" "device-$offer.log" && break; sleep 0.1; done
      grep -q "TLS handshake with the tracker" "device-$offer.log" ||
        fail "the runtime did not say why it refused a server offering $offer: $(tail -2 "device-$offer.log")" ;;
    *) fail "the runtime accepted a server offering $offer: ${result:-nothing}" ;;
  esac
  kill "${pids[-1]}" 2> /dev/null || true
done

[ "$status" -eq 0 ] && echo "mbedTLS runtime and OpenSSL tracker: TLS, --tls-ca (right and wrong) and frame MACs all work;" \
  "the six suites' ciphers and the three groups work, a server offering a CBC suite, P-521 only or" \
  "no extended master secret is refused"
exit $status
