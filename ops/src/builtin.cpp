// The built-in op library: gemm and conv2d.
#include "builtin_ops.h"

namespace kestrel::ops {

Registry builtin_ops() {
  Registry registry;
  registry.add(make_gemm_op());
  registry.add(make_conv2d_op());
  return registry;
}

}  // namespace kestrel::ops
