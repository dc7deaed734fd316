// Compiling from a coroutine without blocking its executor: the compiles run on the
// Compiler's pool while the io thread goes on answering heartbeats and relaying results.
#pragma once

#include <vector>

#include "kestrel/host/compiler.h"
#include "kestrel/rpc/asio.h"

namespace kestrel::host {

// Results in request order. Never blocks the calling executor.
rpc::awaitable<std::vector<CompileResult>> compile_async(Compiler& compiler, std::vector<CompileRequest> requests);

}  // namespace kestrel::host
