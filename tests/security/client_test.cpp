// Security regression tests (issue 15), through real processes and sockets.
#include <catch2/catch.hpp>
