// TuneSession: one leased pool, the jobs in turn.
#include "kestrel/tuner/session.h"

#include "kestrel/host/compiler.h"
#include "kestrel/tuner/evaluator.h"

namespace kestrel::tuner {

TuneSession::TuneSession(std::vector<TuneJob> jobs, RecordStore& db, SessionOptions options)
    : jobs_(std::move(jobs)), db_(db), options_(std::move(options)) {}

bool TuneSession::request_stop() {
  stop_ = true;
  if (!loop_) return false;
  loop_->request_stop();
  return true;
}

rpc::awaitable<SessionResult> TuneSession::run(std::function<void(std::size_t, const TuneProgress&)> on_progress) {
  SessionResult session;
  if (jobs_.empty()) co_return session;
  host::LeasedPool pool(options_.pool);
  std::exception_ptr failure;
  try {
    co_await pool.open();
    host::Target target =
        options_.choose_target ? options_.choose_target(pool.device()) : host::target_for_device(pool.device());
    host::Compiler compiler({options_.compile_threads});
    MeasuredEvaluator evaluator(compiler, pool.measurer(), options_.pool.key);
    TuneOptions tune = options_.tune;
    tune.device_key = options_.pool.key;
    tune.device_class = device_class_of(options_.pool.key, pool.device(), target);
    for (std::size_t i = 0; i < jobs_.size() && !stop_; ++i) {
      const TuneJob& job = jobs_[i];
      Task task;
      // OpError when the op has no kernel for the target's backend.
      task.op = options_.registry ? &options_.registry->get(job.op->name(), target.backend) : job.op;
      task.params = job.params;
      task.target = target;
      TuningLoop loop(std::move(task), db_, evaluator, tune);
      loop_ = &loop;
      TuneResult result = co_await loop.run([&](const TuneProgress& p) {
        if (on_progress) on_progress(i, p);
      });
      loop_ = nullptr;
      if (result.stop_reason == "interrupted") stop_ = true;
      session.results.push_back(std::move(result));
    }
  } catch (...) {
    loop_ = nullptr;
    failure = std::current_exception();
  }
  co_await pool.close();
  if (failure) std::rethrow_exception(failure);
  session.interrupted = stop_;
  co_return session;
}

}  // namespace kestrel::tuner
