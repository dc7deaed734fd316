// Catch2 main for every test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
