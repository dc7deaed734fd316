// `kestrel tracker --http` as users start it: where the dashboard may listen without a
// token, and what the tracker logs about it. Real processes. (What the dashboard serves
// is tested in tests/tracker/ and, over HTTP, in session_report_e2e_test.cpp.)
#include <catch2/catch.hpp>

#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;

TEST_CASE("kestrel tracker refuses a dashboard on a non-loopback address without a token and says how to allow it",
          "[e2e][cli][dashboard]") {
  TempDir dir;
  std::string output;
  CHECK(test::run_command({kKestrel, "tracker", "--port", "0", "--http", "0", "--http-host", "0.0.0.0"}, output,
                          dir.file("o1")) == 2);
  CHECK_THAT(output, Catch::Contains("refusing to serve the dashboard on 0.0.0.0 without a token") &&
                         Catch::Contains("--insecure-no-token"));
  CHECK(test::run_command({kKestrel, "tracker", "--port", "0", "--http-host", "127.0.0.1"}, output, dir.file("o2")) ==
        2);
  CHECK_THAT(output, Catch::Contains("--http-host needs --http PORT"));
  CHECK(test::run_command({kKestrel, "tracker", "--port", "0", "--http-max-streams", "3"}, output, dir.file("o4")) == 2);
  CHECK_THAT(output, Catch::Contains("--http-max-streams needs --http PORT"));
  CHECK(test::run_command({kKestrel, "tracker", "--help"}, output, dir.file("o3")) == 0);
  CHECK_THAT(output, Catch::Contains("--http PORT") && Catch::Contains("--http-interval-ms") &&
                         Catch::Contains("never the device token"));
}

TEST_CASE("kestrel tracker --http starts the dashboard and logs where, also off loopback when the risk is accepted",
          "[e2e][cli][dashboard]") {
  TempDir dir;
  TrackerProcess tracker(dir, {"--http", "0", "--http-host", "0.0.0.0", "--insecure-no-token",
                               "--http-max-connections-per-address", "7", "--http-header-timeout-ms", "900"});
  CHECK(test::wait_for([&] { return tracker.process->log().find("dashboard at") != std::string::npos; }));
  // The flood caps given on the command line are the ones in force.
  CHECK_THAT(tracker.process->log(), Catch::Contains("512 connections (7 per address)") &&
                                         Catch::Contains("headers within 900 ms"));
  TrackerProcess plain(dir, {}, 0, "plain.log");
  CHECK(test::wait_for([&] { return plain.process->log().find("listening on") != std::string::npos; }));
  CHECK(plain.process->log().find("dashboard") == std::string::npos);
}
