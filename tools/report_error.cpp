// A command's error, printed and turned into its exit status (see report_error.h).
#include "report_error.h"

#include <iostream>

#include "kestrel/frontend/errors.h"

namespace kestrel::tools {

int report_error(const std::string& program, std::exception_ptr error) {
  const frontend::ClassifiedError e = frontend::classify(error);
  std::cerr << program << ": " << e.message << "\n";
  if (e.kind == frontend::ErrorKind::usage) std::cerr << "(see " << program << " --help)\n";
  return frontend::exit_status(e.kind);
}

}  // namespace kestrel::tools
