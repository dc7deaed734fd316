// The built-in op library. (Placeholder until gemm and conv2d land: an empty registry.)
#include "kestrel/ops/op.h"

namespace kestrel::ops {

Registry builtin_ops() { return Registry(); }

}  // namespace kestrel::ops
