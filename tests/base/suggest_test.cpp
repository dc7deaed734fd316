// Nearest-name suggestions for mistyped commands, flags and ops.
#include <catch2/catch.hpp>

#include "kestrel/base/suggest.h"

using kestrel::did_you_mean;
using kestrel::edit_distance;
using kestrel::nearest;

TEST_CASE("edit distance counts insertions, deletions, substitutions and swaps") {
  CHECK(edit_distance("tune", "tune") == 0);
  CHECK(edit_distance("tuen", "tune") == 1);     // adjacent swap
  CHECK(edit_distance("gem", "gemm") == 1);      // insertion
  CHECK(edit_distance("trails", "trials") == 1); // swap
  CHECK(edit_distance("Profile", "profile") == 0);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("nearest suggests likely typos and nothing for unrelated words") {
  const std::vector<std::string> commands = {"tracker", "query", "ops", "profile", "tune", "best", "records", "bench"};
  CHECK(nearest("tuen", commands) == "tune");
  CHECK(nearest("benhc", commands) == "bench");
  CHECK(nearest("recrods", commands) == "records");
  CHECK(nearest("prof", commands) == "profile");  // unique prefix
  CHECK(nearest("xyzzy", commands).empty());
  CHECK(nearest("", commands).empty());
  CHECK(nearest("t", commands).empty());           // ambiguous prefix (tracker, tune)
  const std::vector<std::string> ops = {"gemm", "conv2d", "conv2d_nchwc", "layout_nchwc"};
  CHECK(nearest("gem", ops) == "gemm");
  CHECK(nearest("conv", ops).empty());             // prefix of two
  CHECK(did_you_mean("conv2", ops) == " (did you mean 'conv2d'?)");
  CHECK(did_you_mean("matmul", ops).empty());
}
