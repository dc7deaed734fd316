// The generated C of an exported kernel library: the per-kernel wrapper (run-time
// parameters behind a spinlock), the dispatcher source (a table of kernels, exact and
// bucket dispatch, the typed per-op entries) and the public header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/deploy/export.h"
#include "kestrel/ops/op.h"

namespace kestrel::deploy::detail {

// One kernel of the library as the generators see it.
struct TableEntry {
  const ops::Op* op = nullptr;
  ExportedKernel kernel;
  std::vector<std::int64_t> params;       // every parameter of the op in its order
  std::vector<std::int64_t> multipliers;  // per parameter: 0 static, else value = m * symbol
  std::string symbol;                     // the symbol of the dynamic parameters ("" if none)
  std::int64_t bucket = 0;                // the symbol's value this kernel was compiled at
};

// Turns `source` (compiled with KESTREL_KERNEL_NAME=<entry>_impl) into the library's kernel
// `entry`: every dynamic parameter's #define becomes a file-scope variable that the
// appended wrapper sets from the run-time parameters, one call at a time. `unsupported`
// gets why a parameter cannot be dynamic (no single define of that name); such a
// parameter is removed from `entry.multipliers` and from entry.kernel.dynamic.
void make_kernel_source(TableEntry& entry, ops::KernelSource& source, std::vector<std::string>& unsupported);

// The dispatcher's C source (compiled with the kernels) and the public header.
std::string dispatcher_source(const std::vector<TableEntry>& entries);
std::string library_header(const std::vector<TableEntry>& entries);

// The ops present in the library, in order of first appearance.
std::vector<const ops::Op*> ops_of(const std::vector<TableEntry>& entries);

}  // namespace kestrel::deploy::detail
