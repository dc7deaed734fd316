// `kestrel plot` as users run it: short real tunes on the embedded pool, then charts
// (SVG, PNG) of their best-so-far curves, and the errors that write nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
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

// Records of one search as `kestrel records export` writes them: one ok trial of gemm
// 64x64x64 per value of `gflops`, in order, a second apart.
std::string session_lines(const std::string& session, const std::vector<double>& gflops) {
  std::string out;
  for (std::size_t i = 0; i < gflops.size(); ++i) {
    const double cost = 2.0 * 64 * 64 * 64 / (gflops[i] * 1e9);
    nlohmann::json r = {{"op", "gemm"},
                        {"workload", "K=64,M=64,N=64"},
                        {"target", "x86_64-linux-gnu (test)"},
                        {"device_key", "local"},
                        {"device_model", "test cpu"},
                        {"device", "cpu0"},
                        {"device_fingerprint", "x86_64-linux-gnu (test)|test cpu|2"},
                        {"config", "mr=" + std::to_string(i + 1)},
                        {"status", "ok"},
                        {"message", ""},
                        {"round_seconds", {cost, cost, cost}},
                        {"cost", cost},
                        {"gflops", gflops[i]},
                        {"compile_ms", 10.0},
                        {"tool_version", "0.1.0"},
                        {"time_unix_ms", 1795446543004 + 1000 * static_cast<std::int64_t>(i)},
                        {"session", session},
                        {"final_measurement", false},
                        {"is_default", false},
                        {"implementation", "kestrel"}};
    out += r.dump() + "\n";
  }
  return out;
}

// A records database at `db` holding `lines` (kestrel records import).
void import_lines(const std::string& db, const std::string& lines) {
  const std::string file = db + ".jsonl";
  std::ofstream(file) << lines;
  std::string output;
  REQUIRE(test::run_command({kKestrel, "records", "import", "--db", db, file}, output, file + ".out") == 0);
}

// The y coordinates of the points of the first SVG path drawn with `style` (cairo writes
// "M x y L x y ..." in its d attribute).
std::vector<double> path_ys(const std::string& svg, const std::string& style) {
  const auto at = svg.find(style);
  if (at == std::string::npos) return {};
  const auto d = svg.find(" d=\"", at);
  const auto end = svg.find('"', d + 4);
  std::istringstream in(svg.substr(d + 4, end - d - 4));
  std::vector<double> ys;
  std::string word;
  std::vector<double> numbers;
  while (in >> word) {
    if (word == "M" || word == "L" || word == "Z") continue;
    numbers.push_back(std::stod(word));
  }
  for (std::size_t i = 1; i < numbers.size(); i += 2) ys.push_back(numbers[i]);
  return ys;
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
  CHECK(text.find("random: 12 trials, best ") != std::string::npos);  // one session: its database's name
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
                          dir.file("o1")) == 2);
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
  CHECK(output.find("no database or session drawn is called zzzz") != std::string::npos);
  // A directory that does not exist: a clear error, no partial file.
  CHECK(test::run_command({kKestrel, "plot", "--db", db, "-o", dir.file("no/such/dir/a.png")}, output,
                          dir.file("o7")) == 1);
  CHECK(output.find("cannot write") != std::string::npos);
  CHECK_FALSE(exists(dir.file("a.png")));
}

TEST_CASE("kestrel plot --label names a database's curves as the README shows, and the legend names databases",
          "[e2e][plot]") {
  TempDir dir;
  const std::string sa = dir.file("sa.db"), ga = dir.file("ga.db"), tune = dir.file("tune.db");
  import_lines(sa, session_lines("aaaa1111bbbb2222", {10, 20, 30}));
  import_lines(ga, session_lines("cccc3333dddd4444", {15, 25, 28, 29}));
  import_lines(tune, session_lines("eeee5555ffff6666", {5, 6}) + session_lines("9999000011112222", {7, 8}));
  std::string output;

  // The README's example: --label sa=annealing renames the curves of sa.db.
  const std::string svg = dir.file("strategies.svg");
  REQUIRE(test::run_command({kKestrel, "plot", "--db", sa, "--db", ga, "--label", "sa=annealing", "--label",
                             "ga=genetic", "-o", svg},
                            output, dir.file("o1")) == 0);
  INFO(output);
  CHECK(output.find("    annealing: 3 trials, best 30.0 GFLOP/s") != std::string::npos);
  CHECK(output.find("    genetic: 4 trials, best 29.0 GFLOP/s") != std::string::npos);
  std::string text = read_file(svg);
  CHECK(text.find("  annealing: 3 trials, best 30.0 GFLOP/s") != std::string::npos);
  CHECK(text.find("  genetic: 4 trials, best 29.0 GFLOP/s") != std::string::npos);
  CHECK(text.find("session") == std::string::npos);

  // Without --label: each line is named after its database, not a session hash...
  REQUIRE(test::run_command({kKestrel, "plot", "--db", sa, "--db", ga, "-o", svg}, output, dir.file("o2")) == 0);
  CHECK(output.find("    sa: 3 trials") != std::string::npos);
  CHECK(output.find("    ga: 4 trials") != std::string::npos);
  // ... and with its session's id where a database holds several.
  REQUIRE(test::run_command({kKestrel, "plot", "--db", tune, "-o", svg}, output, dir.file("o3")) == 0);
  CHECK(output.find("    tune session eeee5555: 2 trials") != std::string::npos);
  CHECK(output.find("    tune session 99990000: 2 trials") != std::string::npos);
  // A session's id still names one session.
  REQUIRE(test::run_command({kKestrel, "plot", "--db", tune, "--label", "9999=second run", "-o", svg}, output,
                            dir.file("o4")) == 0);
  CHECK(output.find("    tune session eeee5555: 2 trials") != std::string::npos);
  CHECK(output.find("    second run: 2 trials") != std::string::npos);
  // A name that is neither: the closest database, and what to give.
  CHECK(test::run_command({kKestrel, "plot", "--db", sa, "--db", ga, "--label", "saa=annealing", "-o", svg}, output,
                          dir.file("o5")) == 2);
  CHECK(output.find("--label saa=annealing: no database or session drawn is called saa (did you mean 'sa'?) "
                    "(databases: sa, ga; or give the start of a session id)") != std::string::npos);
}

TEST_CASE("kestrel plot fits the value axis to the data: curves far from zero fill the panel", "[e2e][plot]") {
  TempDir dir;
  const std::string db = dir.file("high.db");
  import_lines(db, session_lines("abcdef0123456789", {80, 84, 88, 91, 95}));
  const std::string svg = dir.file("high.svg");
  std::string output;
  REQUIRE(test::run_command({kKestrel, "plot", "--db", db, "-o", svg, "--height", "560"}, output, dir.file("o1")) ==
          0);
  // The curve's one stroked path (round joins), from 80 to 95 GFLOP/s: on an axis from 0
  // it would span 15% of the panel's height (about 65 of 560 points); fitted, most of it.
  const std::vector<double> ys = path_ys(read_file(svg), "stroke-width:2;stroke-linecap:butt;stroke-linejoin:round");
  REQUIRE(ys.size() >= 2);
  const auto [low, high] = std::minmax_element(ys.begin(), ys.end());
  CHECK(*high - *low > 0.4 * 560);
}
