// The command line of the real `kestrel` binary where a new user first meets it: every
// action of `kestrel records` and `kestrel cost-model` explains itself with --help, a mistyped
// action is named with the closest one and the list, and `kestrel ops` states each
// parameter's default once.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using Catch::Matchers::Contains;

TEST_CASE("kestrel records and kestrel cost-model explain each action with --help", "[e2e][cli]") {
  TempDir dir;
  struct Case {
    const char* command;
    const char* action;
    const char* option;  // an option of that action, shown in its help
  };
  for (const Case& c : {Case{"records", "export", "--out"}, Case{"records", "import", "--db"},
                        Case{"records", "migrate", "--from"}, Case{"cost-model", "train", "--folds"},
                        Case{"cost-model", "show", "--json"}, Case{"cost-model", "eval", "--cost-model"}}) {
    for (const char* help : {"--help", "-h"}) {
      const std::string name = std::string(c.command) + " " + c.action + " " + help;
      INFO(name);
      std::string output;
      CHECK(test::run_command({kKestrel, c.command, c.action, help}, output, dir.file(name)) == 0);
      INFO(output);
      CHECK_THAT(output, Contains(std::string("kestrel ") + c.command + " " + c.action) && Contains(c.option) &&
                             !Contains("unknown option"));
    }
  }
  // The command's own help points to the actions' help.
  for (const char* command : {"records", "cost-model"}) {
    std::string output;
    CHECK(test::run_command({kKestrel, command, "--help"}, output, dir.file(std::string(command) + ".help")) == 0);
    CHECK_THAT(output, Contains(std::string("kestrel ") + command + " ACTION --help"));
  }
}

TEST_CASE("a mistyped action of kestrel records or kestrel cost-model names the closest one and lists them",
          "[e2e][cli][bad-input]") {
  TempDir dir;
  std::string output;
  CHECK(test::run_command({kKestrel, "records", "exprot", "--db", dir.file("t.db")}, output, dir.file("o1")) == 2);
  CHECK_THAT(output, Contains("kestrel records: unknown action 'exprot' (did you mean 'export'?); the actions are "
                              "export, import and migrate"));
  // (`kestrel model`, the command's earlier name, still reaches it.)
  CHECK(test::run_command({kKestrel, "model", "trian"}, output, dir.file("o2")) == 2);
  CHECK_THAT(output, Contains("kestrel cost-model: unknown action 'trian' (did you mean 'train'?); the actions are "
                              "train, show and eval"));
  // Nothing close: the list alone.
  CHECK(test::run_command({kKestrel, "records", "zzzzzz"}, output, dir.file("o3")) == 2);
  CHECK_THAT(output, Contains("unknown action 'zzzzzz'; the actions are export, import and migrate"));
  // An action's unknown option: named with the closest one, and where its help is.
  CHECK(test::run_command({kKestrel, "records", "export", "--dbb", dir.file("t.db")}, output, dir.file("o4")) == 2);
  CHECK_THAT(output, Contains("kestrel records export: unknown option '--dbb' (did you mean '--db'?)") &&
                         Contains("(see kestrel records export --help)"));
}

TEST_CASE("kestrel ops states each parameter's default once", "[e2e][cli]") {
  TempDir dir;
  std::string output;
  REQUIRE(test::run_command({kKestrel, "ops"}, output, dir.file("ops.out")) == 0);
  std::istringstream lines(output);
  std::size_t defaults = 0;
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    const std::size_t n = test::count_of(line, "(default ");
    CHECK(n <= 1);
    defaults += n;
  }
  CHECK(defaults > 10);  // conv2d's N, stride, pad, dilation, ... each state theirs
  CHECK_THAT(output, Contains("    stride  stride in both dimensions (default 1)\n"));
}
