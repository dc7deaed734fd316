// The Python that Kestrel's helper scripts run with (scripts/ort_run.py for the model
// check of `kestrel run`, scripts/to_parquet.py for `kestrel dataset`), and quoting for
// the shell lines that start them.
#pragma once

#include <optional>
#include <string>

namespace kestrel::deploy {

// `given` (a --python option) when set, else $KESTREL_PYTHON, $KESTREL_VENV's or the
// source tree's .venv (scripts/setup-python.sh), else python3. Whether it exists or has
// the packages is for the caller to find out.
std::string find_python(const std::optional<std::string>& given);
// `text` in single quotes for /bin/sh.
std::string shell_quote(const std::string& text);

}  // namespace kestrel::deploy
