// compile_async: submit to the pool; one waiting thread resumes the caller when all are done.
#include "kestrel/host/compile_async.h"

#include "kestrel/rpc/run_on_thread.h"

namespace kestrel::host {

rpc::awaitable<std::vector<CompileResult>> compile_async(Compiler& compiler, std::vector<CompileRequest> requests) {
  auto futures = std::make_shared<std::vector<std::future<CompileResult>>>();
  futures->reserve(requests.size());
  for (auto& r : requests) futures->push_back(compiler.submit(std::move(r)));
  co_return co_await rpc::run_on_thread([futures] {
    std::vector<CompileResult> results;
    results.reserve(futures->size());
    for (auto& f : *futures) results.push_back(f.get());
    return results;
  });
}

}  // namespace kestrel::host
