// Test support: a real PostgreSQL server of the tests' own, for the records on
// PostgreSQL. Debian's initdb and pg_ctl ($KESTREL_POSTGRES_BINDIR, else pg_config
// --bindir, else /usr/lib/postgresql/*/bin) set up a data directory under /tmp and start `postgres` on a
// free loopback port (its unix socket in the same directory, trust authentication, fsync
// off); pg_ctl -w waits until it accepts connections. As root (the tests' usual case),
// where PostgreSQL refuses to run, it runs as the `postgres` system user (runuser) and
// owns the directory. The server is fast-shut-down and its directory removed at exit.
//
// postgres() gives one server per test process, started on first use. Where PostgreSQL is
// not installed the test is skipped (exit 77, with the reason), unless
// KESTREL_REQUIRE_POSTGRES=1 (CI), where that fails it; a server that is installed but
// does not start always fails the test.
#pragma once

#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kestrel::test {

// What a shell command prints (stdout), trailing newlines removed.
inline std::string command_output(const std::string& command) {
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
    ::pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The directory of initdb, pg_ctl and createdb; empty when PostgreSQL is not installed.
// $KESTREL_POSTGRES_BINDIR chooses one (a directory without them: as if not installed).
inline std::string postgres_bindir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* chosen = std::getenv("KESTREL_POSTGRES_BINDIR"); chosen != nullptr) {
    const std::string bindir = chosen;
    return fs::exists(bindir + "/initdb", ec) && fs::exists(bindir + "/pg_ctl", ec) ? bindir : "";
  }
  std::string bindir = command_output("pg_config --bindir 2>/dev/null");
  if (!bindir.empty() && fs::exists(bindir + "/initdb", ec) && fs::exists(bindir + "/pg_ctl", ec)) return bindir;
  std::string best;
  for (const auto& version : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    std::string candidate = (version.path() / "bin").string();
    if (fs::exists(candidate + "/initdb", ec) && fs::exists(candidate + "/pg_ctl", ec) && candidate > best) {
      best = candidate;
    }
  }
  return best;
}

class PostgresServer {
 public:
  // Starts a server from `bindir`; throws std::runtime_error with its log when it does not
  // start.
  explicit PostgresServer(const std::string& bindir) : bindir_(bindir), owner_(::getpid()) {
    char pattern[] = "/tmp/kestrel-pg-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    if (::geteuid() == 0) {
      const passwd* user = ::getpwnam("postgres");
      if (user == nullptr) {
        throw std::runtime_error("running as root and there is no 'postgres' user to run PostgreSQL as");
      }
      as_user_ = "runuser -u postgres -- ";
      if (::chown(dir_.c_str(), user->pw_uid, user->pw_gid) != 0) throw std::runtime_error("chown " + dir_ + " failed");
    }
    run("'" + bindir_ + "/initdb' -D '" + dir_ + "/data' -A trust -U kestrel -E UTF8 --locale=C --no-sync > '" +
            dir_ + "/initdb.log' 2>&1",
        "initdb", dir_ + "/initdb.log");
    // A free port may be taken between asking and listening: try a few.
    for (int attempt = 0;; ++attempt) {
      port_ = free_port();
      std::string options = "-p " + std::to_string(port_) +
                            " -c listen_addresses=127.0.0.1 -c unix_socket_directories=" + dir_ +
                            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200";
      int rc = std::system((as_user_ + "'" + bindir_ + "/pg_ctl' -D '" + dir_ + "/data' -l '" + dir_ +
                            "/server.log' -o '" + options + "' -w -t 60 start > '" + dir_ + "/pg_ctl.log' 2>&1")
                               .c_str());
      if (rc == 0) break;
      if (attempt == 2) fail("pg_ctl start", dir_ + "/server.log");
    }
    started_ = true;
  }
  ~PostgresServer() {
    if (::getpid() != owner_) return;  // a forked child leaves the server to its parent
    if (started_) {
      std::system((as_user_ + "'" + bindir_ + "/pg_ctl' -D '" + dir_ + "/data' -m fast -w stop > /dev/null 2>&1").c_str());
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  std::uint16_t port() const { return port_; }

  // The URI of database `name` (no password: trust authentication).
  std::string uri(const std::string& name) const {
    return "postgresql://kestrel@127.0.0.1:" + std::to_string(port_) + "/" + name;
  }

  // Creates a fresh empty database and returns its URI.
  std::string create_database() {
    std::string name = "kestrel_" + std::to_string(::getpid()) + "_" + std::to_string(++databases_);
    run("'" + bindir_ + "/createdb' -h 127.0.0.1 -p " + std::to_string(port_) + " -U kestrel " + name + " > '" +
            dir_ + "/createdb.log' 2>&1",
        "createdb", dir_ + "/createdb.log");
    return uri(name);
  }

 private:
  void run(const std::string& command, const std::string& what, const std::string& log) {
    if (std::system((as_user_ + command).c_str()) != 0) fail(what, log);
  }
  [[noreturn]] void fail(const std::string& what, const std::string& log) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    throw std::runtime_error("PostgreSQL for the tests: " + what + " failed:\n" + text.str());
  }
  static std::uint16_t free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    ::close(fd);
    return ntohs(address.sin_port);
  }

  std::string bindir_;
  pid_t owner_;
  std::string dir_;
  std::string as_user_;  // "runuser -u postgres -- " as root
  std::uint16_t port_ = 0;
  bool started_ = false;
  int databases_ = 0;
};

// Whether PostgreSQL is installed here (the tests can start a server).
inline bool postgres_installed() { return !postgres_bindir().empty(); }

// Whether KESTREL_REQUIRE_POSTGRES=1: a missing PostgreSQL fails the tests.
inline bool postgres_required() {
  const char* required = std::getenv("KESTREL_REQUIRE_POSTGRES");
  return required != nullptr && std::string(required) == "1";
}

// The test process's server, started on first use. Skips the test (exit 77) where
// PostgreSQL is not installed (fails it under KESTREL_REQUIRE_POSTGRES=1); throws when the
// server does not start.
inline PostgresServer& postgres() {
  static std::unique_ptr<PostgresServer> server;
  if (server) return *server;
  const std::string bindir = postgres_bindir();
  if (bindir.empty()) {
    const bool must = postgres_required();
    std::cout << (must ? "failed" : "skipped")
              << ": PostgreSQL is not installed (no initdb from pg_config --bindir or in /usr/lib/postgresql/*/bin; "
                 "run scripts/setup.sh)\n";
    std::cout.flush();
    std::exit(must ? 1 : 77);
  }
  server = std::make_unique<PostgresServer>(bindir);
  return *server;
}

}  // namespace kestrel::test
