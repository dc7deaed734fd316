// The software version of this build (the project's version, e.g. "0.1.0").
#pragma once

#include <string_view>

namespace kestrel {

std::string_view software_version();

}  // namespace kestrel
