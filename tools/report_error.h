// How a `kestrel` command ends on an error: its message on stderr, and the exit status of
// its kind from the one table every command and the Python package share
// (frontend/errors.h).
#pragma once

#include <exception>
#include <string>

namespace kestrel::tools {

// Prints "<program>: <message>" on stderr, with "(see <program> --help)" after a usage
// error, and returns the exit status of the error's kind.
int report_error(const std::string& program, std::exception_ptr error);

}  // namespace kestrel::tools
