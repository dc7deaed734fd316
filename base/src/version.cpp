// The software version, from CMake's project() version.
#include "kestrel/base/version.h"

#ifndef KESTREL_VERSION
#define KESTREL_VERSION "0.0.0"
#endif

namespace kestrel {

std::string_view software_version() { return KESTREL_VERSION; }

}  // namespace kestrel
