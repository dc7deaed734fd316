#!/usr/bin/env bash
# Draws Kestrel's layering from CMake: each library target (kestrel_*), the kestrel_*
# libraries it links directly and its notable external ones (LLVM/Clang/LLD, XGBoost,
# SQLite, libpq, onnx, cairo, OpenSSL, ...), lowest layer first, then the programs.
#
#   scripts/layering.sh [BUILD_DIR]               the indented list (BUILD_DIR: build/)
#   scripts/layering.sh --closure [BUILD_DIR]     per target, everything it links, directly
#                                                 or through other kestrel_* libraries
#   scripts/layering.sh --dot FILE [BUILD_DIR]    also a Graphviz graph of the direct links
#   scripts/layering.sh --svg FILE [BUILD_DIR]    also that graph drawn (needs graphviz's dot)
#
# It reads BUILD_DIR/layering.txt, which every configure writes (cmake/KestrelLayering.cmake:
# each target's LINK_LIBRARIES). A build configured before that file existed is left
# alone: the source tree is configured with BUILD_DIR's options (CMAKE_BUILD_TYPE,
# KESTREL_*) in a temporary directory, removed at exit, and that one's file is read.
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
mode=list
dot_file=""
svg_file=""
build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --closure) mode=closure ;;
    --dot) dot_file="${2:?--dot needs a file}"; shift ;;
    --svg) svg_file="${2:?--svg needs a file}"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "layering.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$build" ] || { echo "layering.sh: one build directory only (see --help)" >&2; exit 2; }
       build="$1" ;;
  esac
  shift
done
source_dir="$(cd "$(dirname "$0")/.." && pwd)"
build="${build:-$source_dir/build}"
[ -d "$build" ] || { echo "layering.sh: no build directory $build (configure one with cmake -B $build)" >&2; exit 2; }

layering="$build/layering.txt"
if [ ! -f "$layering" ]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  options=(-DKESTREL_BUILD_TESTS=OFF -DKESTREL_BUILD_BENCH=OFF)
  if [ -f "$build/CMakeCache.txt" ]; then
    while IFS= read -r line; do options+=("-D$line"); done < <(
      grep -E '^(CMAKE_BUILD_TYPE|KESTREL_[A-Z0-9_]+):(BOOL|STRING|PATH|FILEPATH)=' "$build/CMakeCache.txt" |
        grep -Ev '^KESTREL_BUILD_(TESTS|BENCH):')
  fi
  echo "layering.sh: $build has no layering.txt; configuring $source_dir in $scratch" >&2
  if ! cmake -S "$source_dir" -B "$scratch" "${options[@]}" > "$scratch/configure.log" 2>&1; then
    cat "$scratch/configure.log" >&2
    echo "layering.sh: configuring in $scratch failed" >&2
    exit 1
  fi
  layering="$scratch/layering.txt"
  [ -f "$layering" ] || { echo "layering.sh: configuring with $build's options wrote no layering.txt (a fuzz build has no host libraries)" >&2; exit 1; }
fi

temporary_dot=""
if [ -n "$svg_file" ]; then
  command -v dot > /dev/null || { echo "layering.sh: --svg needs graphviz's dot (apt-get install graphviz); --dot writes the graph" >&2; exit 1; }
  if [ -z "$dot_file" ]; then
    temporary_dot="$(mktemp)"
    dot_file="$temporary_dot"
  fi
fi

awk -v mode="$mode" -v dot_file="$dot_file" '
# The name a notable external library goes by, or "" for the C and C++ libraries,
# threads, dl and header-only JSON. INTERFACE targets named kestrel_* wrap externals.
function external(name) {
  if (name == "kestrel_llvm" || name ~ /^(LLVM|clang|lld)|lib(LLVM|clang|lld)/) return "LLVM/Clang/LLD"
  if (name == "kestrel_xgboost" || name ~ /xgboost/) return "XGBoost"
  if (name ~ /^SQLite::|sqlite/) return "SQLite"
  if (name ~ /LIBPQ|libpq/) return "libpq"
  if (name ~ /^onnx/) return "onnx"
  if (name ~ /protobuf/) return "protobuf"
  if (name ~ /CAIRO|cairo/) return "cairo"
  if (name == "kestrel_openssl" || name ~ /^OpenSSL::/) return "OpenSSL"
  if (name == "kestrel_capnp" || name ~ /^CapnProto::/) return "capnp"
  if (name == "kestrel_sodium" || name ~ /sodium/) return "libsodium"
  if (name == "kestrel_asio") return "Asio"
  if (name == "kestrel_openblas" || name ~ /openblas/) return "OpenBLAS"
  if (name == "kestrel_onednn" || name ~ /dnnl/) return "oneDNN"
  if (name ~ /nvrtc/) return "NVRTC"
  if (name ~ /LIBZIP/) return "libzip"
  if (name ~ /^Boost::/) return "Boost"
  if (name ~ /^CLI11/) return "CLI11"
  if (name ~ /^(Python|pybind11)::/) return "Python/pybind11"
  return ""
}
function add(list, item) { return index(" " list " ", " " item " ") ? list : (list == "" ? item : list " " item) }
function sorted(list,    n, a, i, j, t, out) {
  n = split(list, a, " ")
  for (i = 2; i <= n; i++) for (j = i; j > 1 && tolower(a[j - 1]) > tolower(a[j]); j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
  out = ""
  for (i = 1; i <= n; i++) out = out (i > 1 ? " " : "") a[i]
  return out
}
# Everything `t` reaches through kestrel_* libraries: libraries and externals.
function reach(t,    n, a, i, out) {
  if (t in closure) return closure[t]
  closure[t] = ""  # cycles (none expected) end here
  out = ""
  n = split(libs[t], a, " ")
  for (i = 1; i <= n; i++) { out = add(out, a[i]); out = merge(out, reach(a[i])) }
  n = split(exts[t], a, " ")
  for (i = 1; i <= n; i++) out = add(out, a[i])
  closure[t] = out
  return out
}
function merge(list, more,    n, a, i) {
  n = split(more, a, " ")
  for (i = 1; i <= n; i++) list = add(list, a[i])
  return list
}
function depth(t,    n, a, i, d, best) {
  if (t in depths) return depths[t]
  depths[t] = 0
  best = 0
  n = split(libs[t], a, " ")
  for (i = 1; i <= n; i++) { d = depth(a[i]) + 1; if (d > best) best = d }
  depths[t] = best
  return best
}
NF >= 2 {
  type[$1] = $2
  order[++count] = $1
  raw[$1] = ""
  for (i = 3; i <= NF; i++) raw[$1] = raw[$1] (i > 3 ? " " : "") $i
}
END {
  # Library targets (not the INTERFACE wrappers of externals) and programs.
  for (k = 1; k <= count; k++) {
    t = order[k]
    if (type[t] == "INTERFACE_LIBRARY") continue
    libs[t] = ""; exts[t] = ""
    n = split(raw[t], a, " ")
    for (i = 1; i <= n; i++) {
      name = a[i]
      if (name ~ /^::@/) continue  # the directory markers of a link made in another directory
      gsub(/^\$<LINK_ONLY:|>$/, "", name)
      if (name ~ /^kestrel_/ && (name in type) && type[name] != "INTERFACE_LIBRARY") libs[t] = add(libs[t], name)
      else if ((e = external(name)) != "") exts[t] = add(exts[t], e)
      else if (name in type) {  # an INTERFACE kestrel_* target not named above: its own links
        m = split(raw[name], b, " ")
        for (j = 1; j <= m; j++) if ((e = external(b[j])) != "") exts[t] = add(exts[t], e)
      }
    }
  }
  n = 0
  for (k = 1; k <= count; k++) if ((t = order[k]) in libs) names[++n] = t
  if (mode == "closure") {
    for (k = 1; k <= n; k++) print names[k] ": " sorted(reach(names[k]))
    exit 0
  }
  # Lowest layer first, by name within a layer; programs last.
  for (i = 1; i <= n; i++) key[i] = (names[i] ~ /^kestrel_/ ? 0 : 1) sprintf("%03d", depth(names[i])) names[i]
  for (i = 2; i <= n; i++)
    for (j = i; j > 1 && key[j - 1] > key[j]; j--) { t = key[j]; key[j] = key[j - 1]; key[j - 1] = t; t = names[j]; names[j] = names[j - 1]; names[j - 1] = t }
  heading = ""
  for (k = 1; k <= n; k++) {
    t = names[k]
    h = t ~ /^kestrel_/ ? "libraries (lowest layer first), what each links directly:" : "programs and the Python module:"
    if (h != heading) { print (heading == "" ? "" : "\n") h; heading = h }
    kind = type[t] == "EXECUTABLE" ? "program" : type[t] == "MODULE_LIBRARY" ? "Python module" : tolower(substr(type[t], 1, index(type[t], "_") - 1))
    print "  " t " (" kind ")"
    if (libs[t] != "") print "      " sorted(libs[t])
    if (exts[t] != "") print "      external: " sorted(exts[t])
  }
  if (dot_file != "") {
    print "digraph kestrel_layering {" > dot_file
    print "  rankdir=BT; node [shape=box, fontname=\"sans-serif\"];" > dot_file
    for (k = 1; k <= n; k++) {
      t = names[k]
      if (t !~ /^kestrel_/) print "  \"" t "\" [shape=box, style=bold];" > dot_file
      m = split(libs[t], a, " ")
      for (i = 1; i <= m; i++) print "  \"" t "\" -> \"" a[i] "\";" > dot_file
      m = split(exts[t], a, " ")
      for (i = 1; i <= m; i++) {
        print "  \"" a[i] "\" [shape=ellipse, color=gray40, fontcolor=gray40];" > dot_file
        print "  \"" t "\" -> \"" a[i] "\" [color=gray60];" > dot_file
      }
    }
    print "}" > dot_file
    close(dot_file)
  }
}
' "$layering"

if [ -n "$svg_file" ]; then
  dot -Tsvg "$dot_file" -o "$svg_file"
  [ -z "$temporary_dot" ] || rm -f "$temporary_dot"
fi
