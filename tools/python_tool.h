// The Python that Kestrel's helper scripts run with (scripts/ort_run.py for `kestrel run`,
// scripts/to_parquet.py for `kestrel dataset`), and quoting for the shell lines that start them.
#pragma once

#include <string>

#include "args.h"

namespace kestrel::tools {

// --python, $KESTREL_PYTHON, $KESTREL_VENV's or the source tree's .venv
// (scripts/setup-python.sh), else python3.
std::string find_python(const Args& args);
// `text` in single quotes for /bin/sh.
std::string shell_quote(const std::string& text);

}  // namespace kestrel::tools
