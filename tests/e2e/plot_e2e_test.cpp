// `kestrel plot` as users run it: short real tunes on the embedded pool, then charts
// (SVG, PNG) of their best-so-far curves, and the errors that write nothing.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <vector>

#include "kestrel/records/records.h"
#include "kestrel/records/sqlite_records.h"
#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;

namespace {

// A small, quick workload (every trial well under a second); Kestrel's kernels only.
void tune(const TempDir& dir, const std::string& db, const std::string& strategy) {
  std::string output;
  REQUIRE(test::run_command({kKestrel, "tune", "--op", "gemm", "--shape", "48x40x32", "--trials", "12", "--batch", "4",
                             "--db", db, "--repeat", "2", "--min-repeat-ms", "2", "--final-top", "0", "--seed", "7",
                             "--vendors", "none", "--strategy", strategy, "--quiet"},
                            output, dir.file("tune-" + strategy + ".out")) == 0);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Every element opened is closed, in order (comments, <?...?> and <!...> aside).
bool balanced_xml(const std::string& text) {
  std::vector<std::string> open;
  for (std::size_t i = text.find('<'); i != std::string::npos; i = text.find('<', i + 1)) {
    const std::size_t end = text.find('>', i);
    if (end == std::string::npos) return false;
    const std::string tag = text.substr(i + 1, end - i - 1);
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag.back() == '/') continue;
    const std::string name = tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" \n\t/", 1) - (tag[0] == '/' ? 1 : 0));
    if (tag[0] == '/') {
      if (open.empty() || open.back() != name) return false;
      open.pop_back();
    } else {
      open.push_back(name);
    }
  }
  return open.empty();
}

std::uint32_t big_endian(const std::string& bytes, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

std::string first_session(const std::string& db) {
  records::SqliteRecords records(db);
  return records.all().front().session;
}

}  // namespace

TEST_CASE("kestrel plot draws one line per tuning session as SVG and PNG, with a legend and the size asked for",
          "[e2e][plot]") {
  TempDir dir;
  const std::string sa = dir.file("sa.db"), random = dir.file("random.db");
  tune(dir, sa, "sa");
  tune(dir, random, "random");
  const std::string sa_session = first_session(sa);

  std::string output;
  const std::string svg = dir.file("curve.svg");
  REQUIRE(test::run_command({kKestrel, "plot", "--db", sa, "--db", random, "-o", svg, "--label",
                             sa_session.substr(0, 8) + "=simulated annealing", "--title", "gemm 48x40x32"},
                            output, dir.file("plot-svg.out")) == 0);
  INFO(output);
  CHECK(output.find("1 panel, 2 curves") != std::string::npos);
  const std::string text = read_file(svg);
  CHECK(text.rfind("<?xml", 0) == 0);
  CHECK(text.find("<svg") != std::string::npos);
  CHECK(balanced_xml(text));
  // One stroked path per curve (round joins: the legend's swatches are mitred).
  CHECK(test::count_of(text, "stroke-width:2;stroke-linecap:butt;stroke-linejoin:round") == 2);
  CHECK(text.find("<title>gemm 48x40x32</title>") != std::string::npos);
  CHECK(text.find("simulated annealing: 12 trials, best ") != std::string::npos);
  CHECK(text.find("random session ") != std::string::npos);
  CHECK(text.find("gemm K=32,M=48,N=40 on ") != std::string::npos);

  const std::string png = dir.file("curve.png");
  REQUIRE(test::run_command({kKestrel, "plot", "--db", sa, "-o", png, "--x", "time", "--width", "640", "--height", "400",
                             "--workload", "M=48,N=40,K=32", "--op", "gemm"},
                            output, dir.file("plot-png.out")) == 0);
  const std::string bytes = read_file(png);
  REQUIRE(bytes.size() > 24);
  CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(bytes.substr(12, 4) == "IHDR");
  CHECK(big_endian(bytes, 16) == 640);
  CHECK(big_endian(bytes, 20) == 400);
  // No temporary file is left beside the charts.
  std::size_t files = 0;
  for (const auto& name : {"curve.svg", "curve.png"}) files += exists(dir.file(name)) ? 1 : 0;
  CHECK(files == 2);
  CHECK_FALSE(exists(dir.file(".curve.svg.tmp-" + std::to_string(::getpid()))));
}

TEST_CASE("kestrel plot says clearly what is wrong and writes nothing", "[e2e][plot][bad-input]") {
  TempDir dir;
  const std::string db = dir.file("t.db");
  tune(dir, db, "random");
  std::string output;

  CHECK(test::run_command({kKestrel, "plot", "--db", dir.file("missing.db"), "-o", dir.file("a.svg")}, output,
                          dir.file("o1")) == 1);
  CHECK(output.find("no records database at") != std::string::npos);
  CHECK_FALSE(exists(dir.file("missing.db")));
  CHECK_FALSE(exists(dir.file("a.svg")));

  // Nothing matches: the message lists what the database holds; an existing chart is kept.
  const std::string kept = dir.file("kept.svg");
  std::ofstream(kept) << "an earlier chart";
  CHECK(test::run_command({kKestrel, "plot", "--db", db, "--op", "conv2d", "-o", kept}, output, dir.file("o2")) == 1);
  CHECK(output.find("no successful tuning records matching the filters in " + db + "; it holds:") != std::string::npos);
  CHECK(output.find("gemm K=32,M=48,N=40 (") != std::string::npos);
  CHECK(read_file(kept) == "an earlier chart");

  CHECK(test::run_command({kKestrel, "plot", "--db", db, "-o", dir.file("a.pdf")}, output, dir.file("o3")) == 2);
  CHECK(output.find("give a file name ending in .svg or .png") != std::string::npos);
  CHECK_FALSE(exists(dir.file("a.pdf")));

  CHECK(test::run_command({kKestrel, "plot", "--db", db, "-o", dir.file("a.png"), "--x", "flops"}, output,
                          dir.file("o4")) == 2);
  CHECK(output.find("--x flops: give trials or time") != std::string::npos);
  CHECK(test::run_command({kKestrel, "plot", "--db", db}, output, dir.file("o5")) == 2);
  CHECK(output.find("-o/--output FILE is required") != std::string::npos);
  CHECK(test::run_command({kKestrel, "plot", "--db", db, "-o", dir.file("a.png"), "--label", "zzzz=x"}, output,
                          dir.file("o6")) == 2);
  CHECK(output.find("no session drawn starts with zzzz") != std::string::npos);
  // A directory that does not exist: a clear error, no partial file.
  CHECK(test::run_command({kKestrel, "plot", "--db", db, "-o", dir.file("no/such/dir/a.png")}, output,
                          dir.file("o7")) == 1);
  CHECK(output.find("cannot write") != std::string::npos);
  CHECK_FALSE(exists(dir.file("a.png")));
}
