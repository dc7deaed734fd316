// The session runner (see session_runner.h).
#include "kestrel/frontend/session_runner.h"

#include <exception>

namespace kestrel::frontend {

tuner::SessionResult run_session(asio::io_context& io, const std::vector<tuner::TuneJob>& jobs, records::RecordStore& db,
                                 const tuner::SessionOptions& options, const SessionProgress& on_progress,
                                 const StopWatcher& watch_for_stop) {
  tuner::SessionResult result;
  if (jobs.empty() && !options.make_jobs) return result;
  tuner::LeasedDevices devices(options.pool, options.compile_threads);
  tuner::TuneSession session(jobs, db, options, devices);
  SessionControl control(io, session, db);
  std::function<void()> stop_watching = watch_for_stop ? watch_for_stop(control) : std::function<void()>{};
  std::exception_ptr failure;
  asio::co_spawn(
      io,
      [&]() -> rpc::awaitable<void> {
        result = co_await session.run([&](std::size_t job, const tuner::TuneProgress& p) {
          if (on_progress) on_progress(session.jobs(), job, p);
        });
      },
      [&](std::exception_ptr e) {
        failure = e;
        if (stop_watching) stop_watching();
      });
  io.run();
  if (failure) std::rethrow_exception(failure);
  if (control.terminated()) {
    throw SessionTerminated("terminated by SIGTERM: the devices were released; records so far are in " + db.location());
  }
  return result;
}

}  // namespace kestrel::frontend
