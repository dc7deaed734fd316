// Test support: a board's own network namespace, linked to the host namespace by a veth
// pair with a /30 of its own. Needs root and iproute2; `available()` says whether this
// machine can make one. Removed (namespace and link) on destruction.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace kestrel::test {

class NetNs {
 public:
  // `index` picks the subnet 10.213.<index>.0/30 and the names; keep it unique per test.
  explicit NetNs(int index) {
    std::string tag = std::to_string(::getpid() % 10000) + "x" + std::to_string(index);
    name_ = "kst" + tag;
    host_link_ = "kh" + tag;
    board_link_ = "kb" + tag;
    std::string subnet = "10.213." + std::to_string(index) + ".";
    host_ip_ = subnet + "1";
    board_ip_ = subnet + "2";
    ok_ = run("ip netns add " + name_) && run("ip link add " + host_link_ + " type veth peer name " + board_link_) &&
          run("ip link set " + board_link_ + " netns " + name_) &&
          run("ip addr add " + host_ip_ + "/30 dev " + host_link_) && run("ip link set " + host_link_ + " up") &&
          run("ip netns exec " + name_ + " ip addr add " + board_ip_ + "/30 dev " + board_link_) &&
          run("ip netns exec " + name_ + " ip link set " + board_link_ + " up") &&
          run("ip netns exec " + name_ + " ip link set lo up");
  }
  ~NetNs() {
    run("ip netns del " + name_);
    run("ip link del " + host_link_);
  }
  NetNs(const NetNs&) = delete;
  NetNs& operator=(const NetNs&) = delete;

  bool ok() const { return ok_; }
  const std::string& host_ip() const { return host_ip_; }
  const std::string& board_ip() const { return board_ip_; }
  // Prefix that runs a command inside the namespace.
  std::vector<std::string> exec_prefix() const { return {"/usr/sbin/ip", "netns", "exec", name_}; }

  // Whether namespaces can be made here at all (root, iproute2).
  static bool available(std::string& why) {
    if (::geteuid() != 0) {
      why = "needs root to create network namespaces";
      return false;
    }
    if (::access("/usr/sbin/ip", X_OK) != 0 && ::access("/sbin/ip", X_OK) != 0) {
      why = "needs iproute2 (ip)";
      return false;
    }
    NetNs probe(250);
    if (!probe.ok()) {
      why = "cannot create a network namespace with a veth pair here";
      return false;
    }
    return true;
  }

 private:
  static bool run(const std::string& command) { return std::system((command + " > /dev/null 2>&1").c_str()) == 0; }
  std::string name_, host_link_, board_link_, host_ip_, board_ip_;
  bool ok_ = false;
};

}  // namespace kestrel::test
