// Client sockets for the fuzz targets that talk to a server on loopback. A target makes
// thousands of connections a second; each one the client closes first would sit in
// TIME_WAIT for a minute and hold one of the ~28,000 ephemeral ports, so a long run ran
// out of them and connect() failed (EADDRNOTAVAIL) though nothing was wrong with the
// server. The helpers close with an abortive reset (no TIME_WAIT) and, should the ports
// still run short, wait for one instead of reporting the harness's limit as a finding.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "support.h"

namespace kestrel::fuzz {

// A TCP socket connected to 127.0.0.1:`port`. Retries an interrupted connect (libFuzzer's
// SIGALRM) and, for up to 10 s, one that finds no free local port.
inline int connect_loopback(std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    check(fd >= 0, std::string("socket(): ") + std::strerror(errno));
    int rc;
    do {
      rc = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return fd;
    const int error = errno;
    ::close(fd);
    const bool ports_short = error == EADDRNOTAVAIL || error == EAGAIN;
    check(ports_short && std::chrono::steady_clock::now() < give_up,
          std::string("connect() to the server under test: ") + std::strerror(error));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Closes a client socket with a reset instead of a FIN, so its port is free at once. Only
// for a connection whose exchange is over (what the peer had not read yet is dropped).
inline void close_without_time_wait(int fd) {
  linger option{};
  option.l_onoff = 1;
  option.l_linger = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, sizeof option);
  ::close(fd);
}

}  // namespace kestrel::fuzz
