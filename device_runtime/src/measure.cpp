// BatchRunner: the runtime side of the sandbox. Starts a worker per batch (and a fresh
// one after a crash or a timeout: a fork that execs the registered worker image, so no
// secret of the runtime's reaches a kernel), arms a deadline per candidate, turns a worker's death
// into the status of the candidate it was running, and is the correctness check: the
// reference's outputs and each candidate's are compared here, in memory no kernel can
// write, and a worker's "ok" counts only for outputs that passed.
#include "kestrel/device_runtime/measure.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "kestrel/base/log.h"
#include "kestrel/device_runtime/kernel_runner.h"
#include "machine_state.h"
#include "worker.h"
#include "worker_image.h"

namespace kestrel::device {
namespace {
constexpr std::string_view kLog = "measure";
using rpc::use_nothrow;

// Text a worker (that is, possibly a kernel) wrote, as the runtime passes it on: at most
// `limit` bytes (8 KiB: an OpenCL build log fits), then "..."; printable ASCII, line breaks
// and tabs only (every other byte, terminal escapes and non-ASCII included, becomes '?').
constexpr std::size_t kWorkerTextLimit = 8192;

std::string worker_text(std::string_view text, std::size_t limit = kWorkerTextLimit) {
  std::string out;
  out.reserve(std::min(text.size(), limit + 3));
  for (char c : text.substr(0, limit)) {
    const auto byte = static_cast<unsigned char>(c);
    out += (byte >= 0x20 && byte < 0x7f) || c == '\n' || c == '\t' ? c : '?';
  }
  if (text.size() > limit) out += "...";
  return out;
}

std::string worker_text(const std::vector<std::uint8_t>& bytes, std::size_t from = 0,
                        std::size_t limit = kWorkerTextLimit) {
  if (from > bytes.size()) from = bytes.size();
  return worker_text(std::string_view(reinterpret_cast<const char*>(bytes.data()) + from, bytes.size() - from), limit);
}

// A sandbox step this system does not offer: said once per runtime. Bounded (the
// reference, which may send records too, is uploaded code).
void notice(const std::string& reason) {
  static std::set<std::string> said;
  if (said.size() < 32 && said.insert(reason).second) log::warn(kLog, "worker sandbox: ", reason);
}

// The parent's verdict on one candidate's warm-up outputs.
struct Verdict {
  bool ok = false;
  double max_error = 0;
  std::string message;
};
}  // namespace

std::string describe_signal(int signo) {
  const char* name = sigabbrev_np(signo);
  std::string out = name ? std::string("SIG") + name : "signal " + std::to_string(signo);
  const char* what = sigdescr_np(signo);
  if (what) out += std::string(" (") + what + ")";
  if (signo == SIGILL) out += "; does the kernel use instructions this CPU lacks?";
  return out;
}

struct BatchRunner::Impl {
  Impl(asio::any_io_executor ex, BatchSpec s, ResultFn r, DoneFn d, ProgressFn p)
      : executor(ex),
        spec(std::move(s)),
        on_result(std::move(r)),
        on_done(std::move(d)),
        on_progress(std::move(p)),
        deadline(ex) {}

  asio::any_io_executor executor;
  BatchSpec spec;
  ResultFn on_result;
  DoneFn on_done;
  ProgressFn on_progress;
  asio::steady_timer deadline;
  CpuTimes candidate_started;  // the machine's CPU times when the running candidate started
  std::unique_ptr<asio::posix::stream_descriptor> pipe;
  pid_t child = -1;
  bool cancelled = false;
  bool timed_out = false;
  // The reference's outputs (one vector per output argument), from the first worker.
  std::vector<std::vector<float>> expected;
  std::map<std::size_t, Verdict> verdicts;  // by candidate index
  std::vector<std::uint8_t> wire;  // the request for exec'd workers (worker::encode_batch), made once

  std::size_t output_bytes() const {
    std::size_t bytes = 0;
    for (const auto& arg : spec.request.args) {
      if (arg.is_output) bytes += static_cast<std::size_t>(arg.elements) * sizeof(float);
    }
    return bytes;
  }

  // Keeps the reference's outputs; false when the payload is not the outputs' size.
  bool take_reference(const std::vector<std::uint8_t>& payload) {
    if (payload.size() != output_bytes()) return false;
    if (!expected.empty()) return true;  // a later worker's run of the same reference
    std::size_t at = 0;
    for (const auto& arg : spec.request.args) {
      if (!arg.is_output) continue;
      std::vector<float> values(static_cast<std::size_t>(arg.elements));
      std::memcpy(values.data(), payload.data() + at, values.size() * sizeof(float));
      at += values.size() * sizeof(float);
      expected.push_back(std::move(values));
    }
    return true;
  }

  // Compares a candidate's warm-up outputs with the reference's.
  Verdict compare(const std::vector<std::uint8_t>& payload) const {
    Verdict v;
    if (payload.size() != output_bytes() || expected.empty()) {
      v.message = "the worker handed over " + std::to_string(payload.size()) + " bytes of outputs, expected " +
                  std::to_string(output_bytes());
      return v;
    }
    OutputCheck check(spec.request.tolerance);
    std::size_t at = 0;
    std::size_t which = 0;
    std::vector<float> got;
    for (std::size_t i = 0; i < spec.request.args.size(); ++i) {
      if (!spec.request.args[i].is_output) continue;
      const auto& want = expected[which++];
      got.resize(want.size());
      std::memcpy(got.data(), payload.data() + at, got.size() * sizeof(float));
      at += got.size() * sizeof(float);
      check.add(i, got, want);
    }
    v.ok = check.ok();
    v.max_error = check.max_error();
    v.message = check.message();
    return v;
  }

  // A worker's result as the runtime reports it: with a reference, "ok" stands only when
  // this process checked the candidate's outputs and they matched.
  void apply_verdict(std::size_t index, rpc::CandidateResult& result) const {
    if (spec.reference_fd < 0) return;
    auto v = verdicts.find(index);
    if (v == verdicts.end()) {
      if (result.status == Status::ok) {
        result.status = Status::wrong_answer;
        result.message = "the worker reported success without handing over the outputs for the check";
        result.round_seconds.clear();
      }
      return;
    }
    result.max_error = v->second.max_error;
    if (!v->second.ok) {
      result.status = Status::wrong_answer;
      result.message = v->second.message;
      result.round_seconds.clear();
    }
  }

  // Arms the deadline of the step that begins now and tells the session about it.
  void arm(std::chrono::milliseconds limit, std::optional<std::uint64_t> candidate = std::nullopt) {
    if (on_progress) on_progress(candidate, limit);
    timed_out = false;
    deadline.expires_after(limit);
    deadline.async_wait([this, pid = child](std::error_code ec) {
      if (ec || pid != child) return;
      timed_out = true;
      ::kill(pid, SIGKILL);
    });
  }

  // Waits for the worker to exit; returns a description of how it ended.
  std::string reap() {
    if (child < 0) return {};
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    child = -1;
    deadline.cancel();
    if (pipe) {
      std::error_code ignored;
      pipe->close(ignored);
      pipe.reset();
    }
    if (WIFSIGNALED(status)) return "killed by " + describe_signal(WTERMSIG(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) return "exited with status " + std::to_string(WEXITSTATUS(status));
    return {};
  }

  void kill_worker() {
    if (child > 0) ::kill(child, SIGKILL);
  }

  // Starts a worker for candidates [first, end): a fork that execs the worker image
  // when one is registered (the batch in a sealed memfd), else a fork that is the worker.
  bool fork_worker(std::size_t first, std::string& error) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      error = std::string("socketpair failed: ") + std::strerror(errno);
      return false;
    }
    const worker::Image* image = worker::image();
    int spec_fd = -1;
    if (!image) {
      notice("the worker is a fork of the runtime, its memory and all (" + worker::no_image_reason() + ")");
    } else {
      if (wire.empty()) wire = worker::encode_batch(spec.request);
      spec_fd = ::memfd_create("kestrel-batch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      if (spec_fd < 0) {
        notice(std::string("the worker is a fork of the runtime, its memory and all (memfd_create: ") +
               std::strerror(errno) + ")");
      }
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      error = std::string("fork failed: ") + std::strerror(errno);
      ::close(fds[0]);
      ::close(fds[1]);
      if (spec_fd >= 0) ::close(spec_fd);
      return false;
    }
    if (pid == 0) {
      ::close(fds[0]);
      int result_fd = fds[1];
      if (spec_fd >= 0) {
        const std::string failed = worker::exec_image(*image, result_fd, spec_fd, spec, first, wire);
        worker::run(result_fd, spec, first, {&failed, 1});
      }
      worker::run(result_fd, spec, first);
    }
    ::close(fds[1]);
    if (spec_fd >= 0) ::close(spec_fd);
    child = pid;
    pipe = std::make_unique<asio::posix::stream_descriptor>(executor, fds[0]);
    return true;
  }

  // Reads one record; false on EOF or error.
  rpc::awaitable<bool> read_record(worker::RecordHeader& header, std::vector<std::uint8_t>& payload) {
    auto [ec, n] = co_await asio::async_read(*pipe, asio::buffer(&header, sizeof header), use_nothrow);
    if (ec) co_return false;
    if (header.length > std::max<std::size_t>(64u << 20, output_bytes())) co_return false;
    payload.resize(header.length);
    if (header.length > 0) {
      auto [ec2, n2] = co_await asio::async_read(*pipe, asio::buffer(payload), use_nothrow);
      if (ec2) co_return false;
    }
    co_return true;
  }

  // Every result leaves with the machine's state.
  void report(rpc::CandidateResult& result) {
    result.machine = sample_machine_state(candidate_started);
    on_result(result);
  }

  void fail_rest(std::size_t from, Status status, const std::string& message) {
    for (std::size_t i = from; i < spec.request.candidates.size(); ++i) {
      rpc::CandidateResult r;
      r.id = spec.request.candidates[i].id;
      r.status = status;
      r.message = message;
      report(r);
    }
  }

  rpc::awaitable<std::string> run() {
    const auto timeout = std::chrono::milliseconds(std::max<std::uint32_t>(spec.request.settings.timeout_ms, 1));
    // Preparing inputs and running the reference may take longer than one candidate.
    const auto setup_timeout = timeout * 4 + std::chrono::seconds(10);
    std::size_t next = 0;
    while (next < spec.request.candidates.size() && !cancelled) {
      std::string error;
      if (!fork_worker(next, error)) {
        fail_rest(next, Status::runtime_error, "cannot start a worker: " + error);
        co_return error;
      }
      arm(setup_timeout);
      worker::RecordHeader header;
      std::vector<std::uint8_t> payload;
      bool ok = co_await read_record(header, payload);
      // The worker's notices come first, before it loads any uploaded code.
      for (int notices = 0; ok && header.type == static_cast<std::uint32_t>(worker::Record::notice) && !cancelled;) {
        if (++notices > 16) {
          ok = false;
          break;
        }
        notice(worker_text(payload, 0, 300));
        ok = co_await read_record(header, payload);
      }
      if (cancelled) co_return std::string();
      if (ok && header.type == static_cast<std::uint32_t>(worker::Record::ready) && spec.reference_fd >= 0 &&
          !take_reference(payload)) {
        log::warn(kLog, "worker handed over ", payload.size(), " bytes of reference outputs, expected ", output_bytes());
        ok = false;
      }
      if (!ok || header.type != static_cast<std::uint32_t>(worker::Record::ready)) {
        bool was_timeout = timed_out;
        if (ok && header.type == static_cast<std::uint32_t>(worker::Record::fatal) && payload.size() >= 4) {
          std::uint32_t code = 0;
          std::memcpy(&code, payload.data(), 4);
          std::string message = worker_text(payload, 4);
          auto status = code <= static_cast<std::uint32_t>(Status::last) ? static_cast<Status>(code)
                                                                                 : Status::runtime_error;
          reap();
          fail_rest(next, status, "batch could not run: " + message);
          co_return message;
        }
        kill_worker();
        std::string how = reap();
        std::string message = was_timeout ? "preparing the batch (inputs, reference) took longer than " +
                                                std::to_string(setup_timeout.count()) + " ms"
                                          : "worker died preparing the batch: " + (how.empty() ? "no reason" : how);
        fail_rest(next, Status::runtime_error, message);
        co_return message;
      }
      deadline.cancel();

      std::optional<std::size_t> running;
      while (true) {
        ok = co_await read_record(header, payload);
        if (cancelled) co_return std::string();
        if (!ok) break;
        auto type = static_cast<worker::Record>(header.type);
        if (type == worker::Record::started) {
          if (header.index < next || header.index >= spec.request.candidates.size()) {
            kill_worker();
            break;
          }
          running = header.index;
          candidate_started = read_cpu_times();
          arm(timeout, spec.request.candidates[header.index].id);
        } else if (type == worker::Record::outputs) {
          if (!running || header.index != *running || spec.reference_fd < 0) {
            kill_worker();
            break;
          }
          Verdict v = compare(payload);
          const std::uint8_t answer = v.ok ? 1 : 0;
          verdicts[*running] = std::move(v);
          auto [ec, n] = co_await asio::async_write(*pipe, asio::buffer(&answer, 1), use_nothrow);
          if (cancelled) co_return std::string();
          if (ec) break;
        } else if (type == worker::Record::result) {
          deadline.cancel();
          rpc::CandidateResult result;
          std::string bad;
          if (!rpc::decode_result(payload, result, bad)) {
            log::warn(kLog, "worker sent a bad result: ", bad);
            kill_worker();
            break;
          }
          if (!running || header.index != *running) {
            kill_worker();
            break;
          }
          result.id = spec.request.candidates[header.index].id;
          result.message = worker_text(result.message);  // a kernel's words (vendor errors, GPU logs)
          apply_verdict(header.index, result);
          running.reset();
          next = header.index + 1;
          report(result);
        } else {
          kill_worker();
          break;
        }
      }
      bool was_timeout = timed_out;
      kill_worker();
      std::string how = reap();
      if (running) {
        // The worker died (or was killed) inside this candidate.
        rpc::CandidateResult r;
        r.id = spec.request.candidates[*running].id;
        if (was_timeout) {
          r.status = Status::run_timeout;
          r.message = "exceeded the " + std::to_string(timeout.count()) + " ms limit; worker killed";
        } else {
          r.status = Status::runtime_error;
          r.message = "kernel crashed: worker " + (how.empty() ? std::string("ended unexpectedly") : how);
        }
        log::info(kLog, "candidate ", r.id, ": ", r.message);
        report(r);
        next = *running + 1;
      } else if (next < spec.request.candidates.size()) {
        // Died between candidates: nothing to blame; try the rest in a fresh worker once.
        fail_rest(next, Status::runtime_error, "worker ended between candidates: " + how);
        co_return "worker ended unexpectedly";
      }
    }
    co_return std::string();
  }
};

BatchRunner::BatchRunner(asio::any_io_executor executor, BatchSpec spec, ResultFn on_result, DoneFn on_done,
                         ProgressFn on_progress)
    : impl_(std::make_unique<Impl>(executor, std::move(spec), std::move(on_result), std::move(on_done),
                                   std::move(on_progress))) {
  impl_->spec.module_fds.resize(impl_->spec.request.candidates.size(), -1);
}

BatchRunner::~BatchRunner() {
  if (impl_ && impl_->child > 0) {
    impl_->kill_worker();
    impl_->reap();
  }
}

std::shared_ptr<BatchRunner> BatchRunner::start(asio::any_io_executor executor, BatchSpec spec, ResultFn on_result,
                                                DoneFn on_done, ProgressFn on_progress) {
  std::shared_ptr<BatchRunner> runner(new BatchRunner(executor, std::move(spec), std::move(on_result),
                                                      std::move(on_done), std::move(on_progress)));
  asio::co_spawn(executor, runner->run(), asio::detached);
  return runner;
}

rpc::awaitable<void> BatchRunner::run() {
  auto self = shared_from_this();
  std::string message = co_await impl_->run();
  if (!impl_->cancelled) impl_->on_done(message);
}

void BatchRunner::cancel() {
  if (impl_->cancelled) return;
  impl_->cancelled = true;
  impl_->kill_worker();
  if (impl_->pipe) {
    std::error_code ignored;
    impl_->pipe->cancel(ignored);
  }
}

}  // namespace kestrel::device
