#!/usr/bin/env bash
# What each part of a device runtime costs: builds it (scripts/build-device.sh) unless
# --no-build, then prints, from the linker map the device build writes
# (<build>/tools/kestrel-device.map, -Wl,-Map), the bytes each library puts into the
# binary's loaded sections (code, read-only data, unwind tables, data), from `nm -S -C`
# on the unstripped binary the code and data of each C++ namespace (Asio is header-only,
# so its code sits in Kestrel's objects: only the namespace split shows it), the
# sections of the stripped file, and what it needs at run time (`readelf -d`, NEEDED).
#   scripts/device-size.sh [aarch64-linux-gnu|armv7a-linux-gnueabihf|riscv64-linux-gnu|native] [--static] [--no-build]
# The grouping: OpenSSL (libssl, libcrypto), mbedTLS (libmbedtls, libmbedx509,
# libmbedcrypto), Cap'n Proto (libcapnp, libkj), libsodium, libseccomp, libstdc++
# (libstdc++, libsupc++), libgcc, the C library (static builds: libc.a, libm.a, ...,
# crt files), Kestrel's libraries one by one (the generated schema code apart), and what
# the linker makes (dynamic symbol and relocation tables, PLT, GOT, .eh_frame_hdr).
# A build with LTO attributes the code it compiled to the LTO partitions ("lto"): the
# board builds' Cap'n Proto (scripts/build-capnp.sh: LTO objects) is in that row, and the
# namespace table shows it apart (capnp::, kj::).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
triple="aarch64-linux-gnu"
static=""
build_it=1
for arg in "$@"; do
  case "$arg" in
    --static) static="--static" ;;
    --no-build) build_it=0 ;;
    native | aarch64-linux-gnu | armv7a-linux-gnueabihf | riscv64-linux-gnu) triple="$arg" ;;
    *) echo "device-size: unknown argument '$arg' (a triple, --static, --no-build)" >&2; exit 2 ;;
  esac
done
suffix=""
[ -n "$static" ] && suffix="-static"
build="${KESTREL_DEVICE_BUILD_DIR:-$root/build-device-$triple$suffix}"
case "$triple" in
  native) tools="" ;;
  aarch64-linux-gnu) tools="aarch64-linux-gnu-" ;;
  armv7a-linux-gnueabihf) tools="arm-linux-gnueabihf-" ;;
  riscv64-linux-gnu) tools="riscv64-linux-gnu-" ;;
esac
if [ "$build_it" = 1 ]; then
  KESTREL_DEVICE_BUILD_DIR="$build" "$root/scripts/build-device.sh" "$triple" $static > /dev/null
fi
map="$build/tools/kestrel-device.map"
unstripped="$build/tools/kestrel-device"
stripped="$build/kestrel-device"
for f in "$map" "$unstripped" "$stripped"; do
  [ -f "$f" ] || { echo "device-size: $f missing: run scripts/build-device.sh $triple $static" >&2; exit 1; }
done

total=$(stat -c %s "$stripped")
echo "# $(basename "$build")/kestrel-device: $total bytes stripped"
echo
echo "## By library (linker map: bytes in loaded sections, .bss excluded)"
echo
# Input section lines of the map's "Linker script and memory map" part: " .sect 0xADDR 0xSIZE file"
# (a long section name puts the address, size and file on the next line). Output sections
# that take no file space (.bss, .tbss) or are not loaded (.comment, .debug*, attributes)
# are skipped.
awk -v total="$total" '
  function hex(h,   v, i, c) {
    v = 0; h = tolower(h); sub(/^0x/, "", h)
    for (i = 1; i <= length(h); i++) { c = index("0123456789abcdef", substr(h, i, 1)) - 1; v = v * 16 + c }
    return v
  }
  function group(file,   base) {
    if (file ~ /libssl\.|libcrypto\./) return "OpenSSL (libssl, libcrypto)"
    if (file ~ /libmbed(tls|x509|crypto)\./) return "mbedTLS (libmbedtls, libmbedx509, libmbedcrypto)"
    if (file ~ /libcapnp[.-]|libkj[.-]/) return "Cap'"'"'n Proto (libcapnp, libkj)"
    if (file ~ /libsodium\./) return "libsodium"
    if (file ~ /libseccomp\./) return "libseccomp"
    if (file ~ /libstdc\+\+|libsupc\+\+/) return "libstdc++"
    if (file ~ /libgcc/) return "libgcc"
    if (file ~ /ltrans|\.lto\./) return "lto (Kestrel and what LTO compiled with it)"
    if (file ~ /\.capnp\.c\+\+\.o/) return "Kestrel: generated schema code (rpc/schema)"
    if (file ~ /libkestrel_([a-z_]+)\.a/) { match(file, /libkestrel_[a-z_]+\.a/); base = substr(file, RSTART + 3, RLENGTH - 5); return "Kestrel: " base }
    if (file ~ /CMakeFiles\/kestrel-device\.dir/) return "Kestrel: tools (main)"
    if (file ~ /\/lib(c|m|pthread|dl|rt|resolv|c_nonshared)\.a|crt[1in]\.o|Scrt1\.o|crtbegin|crtend|rcrt1/) return "C library (static parts, start files)"
    return "other: " file
  }
  /^Linker script and memory map/ { in_map = 1; next }
  !in_map { next }
  /^[.A-Za-z_]/ {   # an output section
    split($0, f, /[ \t]+/); out = f[1]
    skip = (out ~ /^\.(bss|tbss|comment|debug|ARM\.attributes|gnu\.attributes|note\.gnu\.gold)/ || out ~ /^\/DISCARD\//)
    next
  }
  skip { next }
  /^ [.A-Za-z_*]/ && !/^ \*/ {   # an input section, maybe wrapped
    n = split($0, f, /[ \t]+/)
    if (n >= 5 && f[3] ~ /^0x/ && f[4] ~ /^0x/) { add(f[2], f[4], f[5]); pending = "" }
    else if (n == 2) pending = f[2]
    next
  }
  pending != "" && /^ +0x[0-9a-f]+ +0x[0-9a-f]+ / {
    n = split($0, f, /[ \t]+/)
    add(pending, f[3], f[4]); pending = ""; next
  }
  { pending = "" }
  function add(sect, size_hex, file,   size, g) {
    size = hex(size_hex)
    if (size == 0) return
    if (sect ~ /^\.(dynsym|dynstr|gnu\.hash|hash|gnu\.version|rela|rel\.|relr|plt|got|dynamic|interp|note|eh_frame_hdr)/ || file == "" || file ~ /^linker/) g = "linker-made (dynamic symbols, relocations, PLT/GOT, unwind index)"
    else g = group(file)
    bytes[g] += size; sum += size
    if (sect ~ /^\.text/) code[g] += size
    else if (sect ~ /^\.(eh_frame|gcc_except_table|ARM\.ex)/) unwind[g] += size
    else other[g] += size
  }
  END {
    printf "| part | bytes | code | unwind tables | data, rodata | share of the file |\n|---|---:|---:|---:|---:|---:|\n"
    n = 0
    for (g in bytes) keys[++n] = g
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (bytes[keys[j]] > bytes[keys[i]]) { t = keys[i]; keys[i] = keys[j]; keys[j] = t }
    for (i = 1; i <= n; i++) { g = keys[i]; printf "| %s | %d | %d | %d | %d | %.1f%% |\n", g, bytes[g], code[g], unwind[g], other[g], 100 * bytes[g] / total }
    printf "| sections in all | %d | | | | %.1f%% |\n", sum, 100 * sum / total
    printf "| headers, alignment padding | %d | | | | %.1f%% |\n", total - sum, 100 * (total - sum) / total
  }
' "$map"

echo
echo "## By namespace (nm -S -C on the unstripped binary: code and data with a symbol)"
echo
"${tools}nm" -S -C --size-sort "$unstripped" 2>/dev/null | awk '
  function hex(h,   v, i, c) {
    v = 0; h = tolower(h); sub(/^0x/, "", h)
    for (i = 1; i <= length(h); i++) { c = index("0123456789abcdef", substr(h, i, 1)) - 1; v = v * 16 + c }
    return v
  }
  $3 ~ /^[tTwWrRdDbBvVuV]$/ {
    size = hex($2); type = $3
    if (type ~ /[bB]/) next
    name = $0; sub(/^[0-9a-f]+ [0-9a-f]+ . /, "", name)
    # the namespace a symbol (or the template or vtable it belongs to) is in
    probe = name; sub(/^(vtable|typeinfo|typeinfo name|VTT|construction vtable|guard variable) for /, "", probe)
    sub(/^(non-virtual|virtual) thunk to /, "", probe)
    if (probe ~ /^kestrel::/) g = "kestrel::"
    else if (probe ~ /^asio::/) g = "asio:: (header-only, in Kestrel objects)"
    else if (probe ~ /^(capnp|kj)::/) g = "capnp::, kj::"
    else if (probe ~ /^(std::|__gnu_cxx::|__cxxabiv1::|__cxa_|__gxx_|operator (new|delete)|d_|__gnu_)/) g = "std:: and the C++ runtime"
    else if (probe ~ /^(mbedtls_|mbedtls)/) g = "mbedtls_* (C)"
    else if (probe ~ /^(SSL_|ssl|tls1|tls_|dtls|EVP_|evp_|X509|x509|ossl_|OSSL_|OPENSSL|openssl|ERR_|err_|BIO_|bio_|ASN1|asn1|BN_|bn_|EC_|ec_|RSA|rsa|CRYPTO_|PEM_|pem_)/) g = "TLS and crypto internals (C: ssl_, ec_, bn_, x509, EVP_, ...; OpenSSL or mbedTLS)"
    else if (probe ~ /^(sodium|crypto_|randombytes|_sodium)/) g = "libsodium (C)"
    else if (probe ~ /^(seccomp_|_db_|db_|arch_|gen_|sys_chk_|_gen_|_bpf_|abi_)/) g = "libseccomp (C)"
    else if (probe ~ /::/) g = "other C++"
    else g = "other C symbols (libc, libgcc, Kestrel C)"
    bytes[g] += size; count[g]++
  }
  END {
    printf "| namespace | bytes | symbols |\n|---|---:|---:|\n"
    n = 0
    for (g in bytes) keys[++n] = g
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (bytes[keys[j]] > bytes[keys[i]]) { t = keys[i]; keys[i] = keys[j]; keys[j] = t }
    for (i = 1; i <= n; i++) printf "| %s | %d | %d |\n", keys[i], bytes[keys[i]], count[keys[i]]
  }'

echo
echo "## Sections of the stripped file (size -A)"
echo
echo '```'
"${tools}size" -A "$stripped" | awk 'NR > 2 && NF == 3 && $2 > 0 { printf "%-20s %9d\n", $1, $2 }'
echo '```'
echo
echo "## Needs at run time (readelf -d NEEDED)"
echo
needed=$(readelf -d "$stripped" | awk '/NEEDED/ {gsub(/[\[\]]/, "", $5); print $5}' | tr '\n' ' ')
echo "${needed:-nothing (static)}"
