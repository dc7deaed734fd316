// The in-process compiler: every target, running a compiled kernel, diagnostics, the
// cache and the pool.
#include "kestrel/rpc/sha256.h"
#include "kestrel/host/compiler.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kestrel/kernel/abi.h"

using kestrel::host::CompileRequest;
using kestrel::host::CompileResult;
using kestrel::host::Compiler;
using kestrel::host::CompilerOptions;
using kestrel::host::elf_machine;
using kestrel::host::parse_target;
using kestrel::host::Target;

namespace {

// y[i] = SCALE * x[i] + 1, split into blocks over parallel_for; zeroes y first with a
// call to memset, an undefined reference the loader resolves from libc.
constexpr const char* kAxpy = R"(#include "kestrel/kernel/abi.h"
#ifndef SCALE
#error SCALE must be defined
#endif
#define BLOCK 64

struct job { const float* x; float* y; int64_t n; };

static void block(int64_t b, void* ctx) {
  const struct job* j = (const struct job*)ctx;
  int64_t end = (b + 1) * BLOCK < j->n ? (b + 1) * BLOCK : j->n;
  for (int64_t i = b * BLOCK; i < end; ++i) j->y[i] = SCALE * j->x[i] + 1.0f;
}

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 2) return 2;
  float* scratch = (float*)kestrel_alloc(svc, 256 * sizeof(float));
  if (!scratch) return 3;
  kestrel_release(svc, scratch);
  struct job j = {(const float*)args[0].data, (float*)args[1].data, args[0].i64};
  __builtin_memset(j.y, 0, (size_t)j.n * sizeof(float));  /* a call: the size is unknown */
  kestrel_parallel_for(svc, (j.n + BLOCK - 1) / BLOCK, block, &j);
  return 0;
}
)";

// A 50-line register-tiled matmul, for timing.
constexpr const char* kMatmul = R"(#include "kestrel/kernel/abi.h"
#ifndef MR
#define MR 4
#endif
#ifndef NR
#define NR 16
#endif
#ifndef KC
#define KC 128
#endif

static void tile(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
                 int64_t i0, int64_t j0) {
  float acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = 0.0f;
  for (int64_t p0 = 0; p0 < k; p0 += KC) {
    int64_t pend = p0 + KC < k ? p0 + KC : k;
    for (int64_t p = p0; p < pend; ++p) {
      for (int i = 0; i < MR; ++i) {
        float av = i0 + i < m ? a[(i0 + i) * k + p] : 0.0f;
        for (int j = 0; j < NR; ++j) acc[i][j] += av * (j0 + j < n ? b[p * n + j0 + j] : 0.0f);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j)
      if (i0 + i < m && j0 + j < n) c[(i0 + i) * n + j0 + j] = acc[i][j];
}

struct gemm { const float* a; const float* b; float* c; int64_t m, n, k, tiles_n; };

static void row_tile(int64_t t, void* ctx) {
  const struct gemm* g = (const struct gemm*)ctx;
  tile(g->a, g->b, g->c, g->m, g->n, g->k, (t / g->tiles_n) * MR, (t % g->tiles_n) * NR);
}

KESTREL_KERNEL(svc, args, num_args) {
  if (num_args != 6) return 1;
  struct gemm g = {(const float*)args[0].data, (const float*)args[1].data, (float*)args[2].data,
                   args[3].i64, args[4].i64, args[5].i64, 0};
  g.tiles_n = (g.n + NR - 1) / NR;
  kestrel_parallel_for(svc, ((g.m + MR - 1) / MR) * g.tiles_n, row_tile, &g);
  return 0;
}
)";

CompileRequest axpy(const Target& target, const std::string& scale = "2.0f") {
  CompileRequest request;
  request.source.file_name = "axpy.c";
  request.source.text = kAxpy;
  request.source.defines = {{"SCALE", scale}};
  request.target = target;
  return request;
}

std::string native_machine() {
  const std::string triple = parse_target("native").triple;
  if (triple.starts_with("x86_64")) return "x86_64";
  if (triple.starts_with("aarch64")) return "aarch64";
  if (triple.starts_with("armv7a")) return "arm";
  return "riscv64";
}

// A shared object in memory, loaded through a memfd (never touching the disk).
class LoadedModule {
 public:
  explicit LoadedModule(const std::vector<std::uint8_t>& image) {
    fd_ = ::memfd_create("kestrel-kernel", MFD_CLOEXEC);
    REQUIRE(fd_ >= 0);
    REQUIRE(::write(fd_, image.data(), image.size()) == static_cast<ssize_t>(image.size()));
    const std::string path = "/proc/self/fd/" + std::to_string(fd_);
    handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    INFO("dlopen: " << (handle_ ? "" : ::dlerror()));
    REQUIRE(handle_ != nullptr);
  }
  ~LoadedModule() {
    if (handle_) ::dlclose(handle_);
    if (fd_ >= 0) ::close(fd_);
  }
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  void* symbol(const char* name) const { return ::dlsym(handle_, name); }

 private:
  int fd_ = -1;
  void* handle_ = nullptr;
};

// Test services: serial parallel_for, malloc-backed scratch.
void serial_for(void*, int64_t n, void (*fn)(int64_t, void*), void* ctx) {
  for (int64_t i = 0; i < n; ++i) fn(i, ctx);
}
void* scratch_alloc(void*, size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
void scratch_release(void*, void* ptr) { std::free(ptr); }

// Runs the axpy kernel on 1000 elements and checks y = scale * x + 1.
void check_axpy_runs(const CompileResult& result, float scale) {
  INFO(result.diagnostics);
  REQUIRE(result.ok);
  LoadedModule module(result.shared_object);
  const auto* version = static_cast<const std::uint32_t*>(module.symbol(KESTREL_KERNEL_ABI_SYMBOL));
  REQUIRE(version != nullptr);
  CHECK(*version == KESTREL_KERNEL_ABI_VERSION);
  auto kernel = reinterpret_cast<kestrel_kernel_fn>(module.symbol(KESTREL_KERNEL_DEFAULT_ENTRY));
  REQUIRE(kernel != nullptr);
  CHECK(module.symbol("block") == nullptr);  // -fvisibility=hidden
  const std::string image(result.shared_object.begin(), result.shared_object.end());
  CHECK(image.find("memset") != std::string::npos);  // an undefined reference, resolved by dlopen

  const kestrel_services services{KESTREL_KERNEL_ABI_VERSION, 1, nullptr, serial_for, scratch_alloc, scratch_release,
                                  nullptr};
  std::vector<float> x(1000), y(1000, -1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  kestrel_arg args[2] = {{x.data(), static_cast<int64_t>(x.size()), 0}, {y.data(), static_cast<int64_t>(y.size()), 0}};
  REQUIRE(kernel(&services, args, 2) == 0);
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == scale * x[i] + 1.0f);
  CHECK(kernel(&services, args, 1) == 2);
}

}  // namespace

TEST_CASE("a kernel compiles for every target and is an ELF of its machine", "[compiler]") {
  Compiler compiler({.threads = 1});
  const std::vector<std::pair<Target, std::string>> targets = {
      {parse_target("native"), native_machine()},
      {parse_target("x86_64-linux-gnu"), "x86_64"},
      {parse_target("aarch64-linux-gnu"), "aarch64"},
      {parse_target("armv7a-linux-gnueabihf"), "arm"},
      {parse_target("riscv64-linux-gnu"), "riscv64"},
      {parse_target("aarch64-linux-gnu", "cortex-a72"), "aarch64"},
      {parse_target("armv7a-linux-gnueabihf", "cortex-a7"), "arm"},
      {parse_target("riscv64-linux-gnu", "rv64gcv"), "riscv64"},
  };
  for (const auto& [target, machine] : targets) {
    const CompileResult result = compiler.compile(axpy(target));
    INFO(target.to_string() << ":\n" << result.diagnostics);
    REQUIRE(result.ok);
    CHECK(result.diagnostics.empty());
    CHECK_FALSE(result.cached);
    CHECK(elf_machine(result.shared_object) == machine);
    CHECK(result.key == Compiler::hash_of(axpy(target)));
    // The module's name is the SHA-256 of its bytes (what a device checks on upload).
    CHECK(result.hash == kestrel::rpc::sha256_hex(result.shared_object));
  }
}

#if defined(__x86_64__)
TEST_CASE("the x86_64 shared object loads from a memfd and computes the right answer", "[compiler]") {
  Compiler compiler({.threads = 1});
  check_axpy_runs(compiler.compile(axpy(parse_target("x86_64-linux-gnu"), "3.0f")), 3.0f);
}
#endif

TEST_CASE("the native shared object, tuned for this cpu, runs", "[compiler]") {
  Compiler compiler({.threads = 1});
  const Target native = parse_target("native");
  INFO(native.to_string());
  check_axpy_runs(compiler.compile(axpy(native, "-0.25f")), -0.25f);
}

TEST_CASE("a syntax error is a failed result whose diagnostics name the line", "[compiler]") {
  Compiler compiler({.threads = 1});
  CompileRequest request = axpy(parse_target("aarch64-linux-gnu"));
  request.source.file_name = "ops/broken.c";
  request.source.text = "#include \"kestrel/kernel/abi.h\"\n"
                        "KESTREL_KERNEL(svc, args, n) {\n"
                        "  int x = SCALE\n"
                        "  return x;\n"
                        "}\n";
  const CompileResult result = compiler.compile(request);
  INFO(result.diagnostics);
  CHECK_FALSE(result.ok);
  CHECK(result.shared_object.empty());
  CHECK(result.diagnostics.find("broken.c:3:") != std::string::npos);
  CHECK(result.diagnostics.find("error:") != std::string::npos);
  CHECK(result.diagnostics.find("1 error generated") != std::string::npos);

  // Failures are deterministic, so they are cached too.
  const CompileResult again = compiler.compile(request);
  CHECK(again.cached);
  CHECK_FALSE(again.ok);
  CHECK(again.diagnostics == result.diagnostics);

  request.source.text = "int f(void) { return undeclared_function(); }\n";
  const CompileResult implicit = compiler.compile(request);
  INFO(implicit.diagnostics);
  CHECK_FALSE(implicit.ok);
  CHECK(implicit.diagnostics.find("broken.c:1:") != std::string::npos);

  request.source.text = "#include <stdio.h>\n";  // no libc headers: freestanding
  const CompileResult no_libc = compiler.compile(request);
  INFO(no_libc.diagnostics);
  CHECK_FALSE(no_libc.ok);
  CHECK(no_libc.diagnostics.find("'stdio.h' file not found") != std::string::npos);
}

TEST_CASE("warnings are kept in the diagnostics of a successful compile", "[compiler]") {
  Compiler compiler({.threads = 1});
  CompileRequest request = axpy(parse_target("x86_64-linux-gnu"));
  request.source.text = std::string(kAxpy) + "static int unused_function(void) { return 1; }\n";
  request.source.defines.push_back({"EXTRA", ""});
  const CompileResult result = compiler.compile(request);
  INFO(result.diagnostics);
  CHECK(result.ok);
  // -Wunused-function is off by default; an explicit #warning always shows.
  request.source.text = std::string(kAxpy) + "#warning kestrel test warning\n";
  const CompileResult warned = compiler.compile(request);
  INFO(warned.diagnostics);
  CHECK(warned.ok);
  CHECK(warned.diagnostics.find("axpy.c:") != std::string::npos);
  CHECK(warned.diagnostics.find("warning: kestrel test warning") != std::string::npos);
}

TEST_CASE("a bad cpu is a clear failure, not a crash", "[compiler]") {
  Compiler compiler({.threads = 1});
  for (const Target& target : {parse_target("aarch64-linux-gnu", "cortex-z99"),
                               parse_target("x86_64-linux-gnu", "pentium-9000"),
                               parse_target("armv7a-linux-gnueabihf", "cortex-z99"),
                               parse_target("riscv64-linux-gnu", "rv64qqq")}) {
    const CompileResult result = compiler.compile(axpy(target));
    INFO(target.to_string() << ":\n" << result.diagnostics);
    CHECK_FALSE(result.ok);
    CHECK(result.shared_object.empty());
    CHECK(result.diagnostics.find(target.cpu) != std::string::npos);
    CHECK(result.diagnostics.find("error") != std::string::npos);
  }
}

TEST_CASE("bad requests are failed results", "[compiler]") {
  Compiler compiler({.threads = 1});
  CompileRequest request = axpy(parse_target("x86_64-linux-gnu"));
  request.opt_level = 7;
  CompileResult result = compiler.compile(request);
  CHECK_FALSE(result.ok);
  CHECK(result.diagnostics.find("optimisation level 7") != std::string::npos);

  request = axpy(parse_target("x86_64-linux-gnu"));
  request.source.backend = kestrel::ops::Backend::cuda;
  result = compiler.compile(request);
  CHECK_FALSE(result.ok);
  CHECK(result.diagnostics.find("CPU kernels only") != std::string::npos);

  request = axpy(parse_target("x86_64-linux-gnu"));
  request.source.defines.clear();  // the kernel's #error
  result = compiler.compile(request);
  INFO(result.diagnostics);
  CHECK_FALSE(result.ok);
  CHECK(result.diagnostics.find("SCALE must be defined") != std::string::npos);
}

TEST_CASE("identical compiles hit the cache; a changed define misses", "[compiler]") {
  Compiler compiler({.threads = 1, .cache_entries = 2});
  const CompileRequest request = axpy(parse_target("aarch64-linux-gnu"));
  const CompileResult first = compiler.compile(request);
  REQUIRE(first.ok);
  CHECK_FALSE(first.cached);
  CHECK(first.compile_ms > 0);

  const CompileResult second = compiler.compile(request);
  CHECK(second.cached);
  CHECK(second.compile_ms == 0);
  CHECK(second.hash == first.hash);
  CHECK(second.shared_object == first.shared_object);

  const CompileResult other = compiler.compile(axpy(parse_target("aarch64-linux-gnu"), "4.0f"));
  REQUIRE(other.ok);
  CHECK_FALSE(other.cached);
  CHECK(other.hash != first.hash);
  CHECK(other.shared_object != first.shared_object);

  // LRU with two entries: a third distinct compile evicts the least recently used.
  CHECK(compiler.compile(request).cached);  // `request` is now the most recent
  CHECK_FALSE(compiler.compile(axpy(parse_target("aarch64-linux-gnu"), "5.0f")).cached);
  CHECK(compiler.compile(request).cached);
  CHECK_FALSE(compiler.compile(axpy(parse_target("aarch64-linux-gnu"), "4.0f")).cached);

  // Output is deterministic: a fresh compiler produces the same bytes.
  Compiler fresh({.threads = 1});
  const CompileResult again = fresh.compile(request);
  CHECK_FALSE(again.cached);
  CHECK(again.shared_object == first.shared_object);
}

// A fresh directory for a disk cache, removed with its entries afterwards.
class CacheDir {
 public:
  CacheDir() {
    char pattern[] = "/tmp/kestrel-compile-cache-test-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path_ = pattern;
  }
  ~CacheDir() { std::filesystem::remove_all(path_); }
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;
  const std::string& path() const { return path_; }
  // The entry files (not the temporary names of unfinished writes).
  std::vector<std::filesystem::path> entries() const {
    std::vector<std::filesystem::path> out;
    for (const auto& item : std::filesystem::recursive_directory_iterator(path_))
      if (item.is_regular_file() && item.path().filename().string().find(".tmp-") == std::string::npos)
        out.push_back(item.path());
    return out;
  }

 private:
  std::string path_;
};

TEST_CASE("the disk cache serves another compiler the identical object, and a change of source, define, target or flag misses", "[compiler]") {
  const CacheDir dir;
  const Target native = parse_target("native");
  const CompileRequest request = axpy(native, "3.0f");
  CompileResult first;
  {
    Compiler writer({.threads = 1, .cache_dir = dir.path()});
    CHECK(writer.cache_dir() == dir.path());
    first = writer.compile(request);
    REQUIRE(first.ok);
    CHECK_FALSE(first.cached);
    CHECK_FALSE(first.from_disk);
  }
  REQUIRE(dir.entries().size() == 1);
  CHECK(dir.entries().front().filename() == first.key);

  // Another compiler (as another process would): the same bytes, from disk, loadable.
  Compiler reader({.threads = 1, .cache_dir = dir.path()});
  const CompileResult hit = reader.compile(request);
  CHECK(hit.cached);
  CHECK(hit.from_disk);
  CHECK(hit.compile_ms == 0);
  CHECK(hit.key == first.key);
  CHECK(hit.hash == first.hash);
  CHECK(hit.shared_object == first.shared_object);
  CHECK(hit.diagnostics == first.diagnostics);
  check_axpy_runs(hit, 3.0f);
  // Then from memory.
  const CompileResult again = reader.compile(request);
  CHECK(again.cached);
  CHECK_FALSE(again.from_disk);
  CHECK(again.shared_object == first.shared_object);

  auto misses = [&](auto change) {
    CompileRequest changed = request;
    change(changed);
    const CompileResult result = reader.compile(changed);
    INFO(result.diagnostics);
    CHECK(result.ok);
    CHECK_FALSE(result.cached);
    CHECK_FALSE(result.from_disk);
    CHECK(result.key != first.key);
    return result;
  };
  const CompileResult text = misses([](CompileRequest& r) { r.source.text += "\n/* another kernel */\n"; });
  const CompileResult define = misses([](CompileRequest& r) { r.source.defines[0].value = "4.0f"; });
  check_axpy_runs(define, 4.0f);
  const CompileResult triple = misses([](CompileRequest& r) { r.target = parse_target("aarch64-linux-gnu"); });
  CHECK(elf_machine(triple.shared_object) == "aarch64");
  misses([](CompileRequest& r) { r.target.features = "-avx512f"; });
  const CompileResult flag = misses([](CompileRequest& r) { r.opt_level = 1; });
  check_axpy_runs(flag, 3.0f);
  CHECK(dir.entries().size() == 6);

  // Each of them is now a disk hit for yet another compiler, with its own bytes.
  Compiler third({.threads = 1, .cache_dir = dir.path()});
  const CompileResult define_hit = third.compile([&] {
    CompileRequest r = request;
    r.source.defines[0].value = "4.0f";
    return r;
  }());
  CHECK(define_hit.from_disk);
  CHECK(define_hit.shared_object == define.shared_object);
  CHECK(define_hit.shared_object != first.shared_object);

  // Without a directory of its own a compiler takes KESTREL_COMPILE_CACHE's; "off" wins.
  REQUIRE(::setenv("KESTREL_COMPILE_CACHE", dir.path().c_str(), 1) == 0);
  CHECK(Compiler({.threads = 1}).cache_dir() == dir.path());
  CHECK(Compiler({.threads = 1}).compile(request).from_disk);
  CHECK(Compiler({.threads = 1, .cache_dir = "off"}).cache_dir().empty());
  CHECK_FALSE(Compiler({.threads = 1, .cache_dir = "off"}).compile(request).cached);
  REQUIRE(::setenv("KESTREL_COMPILE_CACHE", "off", 1) == 0);
  CHECK(Compiler({.threads = 1}).cache_dir().empty());
  REQUIRE(::unsetenv("KESTREL_COMPILE_CACHE") == 0);
  CHECK(Compiler({.threads = 1}).cache_dir().empty());
}

TEST_CASE("the disk cache keeps compile errors, reads a damaged entry as a miss and survives an unusable directory", "[compiler]") {
  const CacheDir dir;
  CompileRequest broken = axpy(parse_target("x86_64-linux-gnu"));
  broken.source.defines.clear();  // the kernel's #error
  {
    Compiler writer({.threads = 1, .cache_dir = dir.path()});
    const CompileResult failed = writer.compile(broken);
    CHECK_FALSE(failed.ok);
    Compiler reader({.threads = 1, .cache_dir = dir.path()});
    const CompileResult stored = reader.compile(broken);
    CHECK(stored.from_disk);
    CHECK_FALSE(stored.ok);
    CHECK(stored.hash.empty());
    CHECK(stored.diagnostics == failed.diagnostics);
    CHECK(stored.diagnostics.find("SCALE must be defined") != std::string::npos);
  }

  // A damaged entry: recompiled (the same bytes as before) and written again whole.
  const CompileRequest request = axpy(parse_target("x86_64-linux-gnu"), "5.0f");
  CompileResult original;
  {
    Compiler writer({.threads = 1, .cache_dir = dir.path()});
    original = writer.compile(request);
    REQUIRE(original.ok);
  }
  const std::filesystem::path entry = std::filesystem::path(dir.path()) / original.key.substr(0, 2) / original.key;
  REQUIRE(std::filesystem::exists(entry));
  const auto size = std::filesystem::file_size(entry);
  for (const std::uintmax_t cut : {size / 2, size - 1}) {
    {
      std::fstream file(entry, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(static_cast<std::streamoff>(cut));
      file.put('\x5a' ^ static_cast<char>(cut));  // one byte altered
    }
    Compiler reader({.threads = 1, .cache_dir = dir.path()});
    const CompileResult result = reader.compile(request);
    CHECK_FALSE(result.from_disk);
    CHECK(result.shared_object == original.shared_object);
    CHECK(reader.compile(request).cached);
    Compiler after({.threads = 1, .cache_dir = dir.path()});
    CHECK(after.compile(request).from_disk);
  }
  std::filesystem::resize_file(entry, size / 3);  // a truncated file
  Compiler truncated({.threads = 1, .cache_dir = dir.path()});
  CHECK_FALSE(truncated.compile(request).from_disk);

  // A cache directory below a regular file cannot exist: compiles work, nothing cached.
  const std::string file = dir.path() + "/plain-file";
  std::ofstream(file) << "not a directory";
  Compiler unusable({.threads = 1, .cache_dir = file + "/cache"});
  const CompileResult result = unusable.compile(request);
  CHECK(result.ok);
  CHECK(result.shared_object == original.shared_object);
  CHECK_FALSE(std::filesystem::exists(file + "/cache"));
}

TEST_CASE("compile phases: each measured, together the compile's time", "[compiler]") {
  Compiler compiler({.threads = 1, .cache_entries = 0});
  const CompileResult result = compiler.compile(axpy(parse_target("native"), "6.0f"));
  REQUIRE(result.ok);
  const auto& p = result.phases;
  CHECK(p.frontend_ms > 0);
  CHECK(p.optimise_ms > 0);
  CHECK(p.codegen_ms > 0);
  CHECK(p.link_ms > 0);
  const double sum = p.frontend_ms + p.optimise_ms + p.codegen_ms + p.link_ms;
  CHECK(sum <= result.compile_ms);
  CHECK(sum >= 0.75 * result.compile_ms);  // the rest: copies, the image's hash (slack for preemption)
  CompileRequest object = axpy(parse_target("native"), "6.0f");
  object.output = CompileRequest::Output::object;
  const CompileResult unlinked = compiler.compile(object);
  REQUIRE(unlinked.ok);
  CHECK(unlinked.phases.link_ms == 0);
  CHECK(unlinked.phases.optimise_ms > 0);
}

TEST_CASE("the cache key covers everything that determines the output", "[compiler]") {
  const CompileRequest base = axpy(parse_target("aarch64-linux-gnu"));
  const std::string key = Compiler::hash_of(base);
  CHECK(key == Compiler::hash_of(base));
  auto differs = [&](auto change) {
    CompileRequest request = base;
    change(request);
    return Compiler::hash_of(request) != key;
  };
  CHECK(differs([](CompileRequest& r) { r.target.cpu = "cortex-a72"; }));
  CHECK(differs([](CompileRequest& r) { r.target.features = "+sve"; }));
  CHECK(differs([](CompileRequest& r) { r.target = parse_target("x86_64-linux-gnu"); }));
  CHECK(differs([](CompileRequest& r) { r.opt_level = 3; }));
  CHECK(differs([](CompileRequest& r) { r.source.text += "\n"; }));
  CHECK(differs([](CompileRequest& r) { r.source.file_name = "other.c"; }));
  CHECK(differs([](CompileRequest& r) { r.source.defines[0].value = "2.5f"; }));
  CHECK(differs([](CompileRequest& r) { r.source.defines.push_back({"A", "1"}); }));
  CHECK(differs([](CompileRequest& r) {  // defines in order: A=1,B=2 vs B=2,A=1
    r.source.defines = {{"B", "2"}, {"SCALE", "2.0f"}};
  }));
  CHECK(differs([](CompileRequest& r) {  // field boundaries: "SCALE"+"2.0f" vs "SCALE2"+".0f"
    r.source.defines = {{"SCALE2", ".0f"}};
  }));
  CHECK(Compiler::version() == "clang 19.1.7");
}

TEST_CASE("compile_all on two threads equals serial compiles", "[compiler]") {
  std::vector<CompileRequest> requests;
  for (const char* target : {"x86_64-linux-gnu", "aarch64-linux-gnu", "armv7a-linux-gnueabihf", "riscv64-linux-gnu"})
    for (const char* scale : {"1.5f", "2.5f", "3.5f"}) requests.push_back(axpy(parse_target(target), scale));
  requests.push_back(requests.front());  // a duplicate: compiled once
  CompileRequest broken = axpy(parse_target("x86_64-linux-gnu"));
  broken.source.text = "int f( {";
  requests.push_back(broken);

  Compiler serial({.threads = 1});
  std::vector<CompileResult> expected;
  for (const CompileRequest& request : requests) expected.push_back(serial.compile(request));

  Compiler pool({.threads = 2});
  CHECK(pool.threads() == 2);
  const std::vector<CompileResult> results = pool.compile_all(requests);
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i << ": " << results[i].diagnostics);
    CHECK(results[i].ok == expected[i].ok);
    CHECK(results[i].hash == expected[i].hash);
    CHECK(results[i].shared_object == expected[i].shared_object);
    CHECK(results[i].diagnostics == expected[i].diagnostics);
  }
  CHECK_FALSE(results.back().ok);

  auto future = pool.submit(axpy(parse_target("riscv64-linux-gnu"), "9.0f"));
  CHECK(future.get().ok);
}

TEST_CASE("elf_machine reads e_machine and refuses non-ELF bytes", "[compiler]") {
  CHECK(elf_machine({}).empty());
  const std::vector<std::uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd',
                                          ' ', 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o'};
  CHECK(elf_machine(text).empty());
  std::vector<std::uint8_t> header(64, 0);
  header[0] = 0x7f, header[1] = 'E', header[2] = 'L', header[3] = 'F', header[4] = 2, header[5] = 1;
  header[18] = 62;
  CHECK(elf_machine(header) == "x86_64");
  header[18] = 183;
  CHECK(elf_machine(header) == "aarch64");
  header[4] = 1, header[18] = 40;
  CHECK(elf_machine(header) == "arm");
  header[4] = 2, header[5] = 2, header[18] = 0, header[19] = 243;  // big-endian
  CHECK(elf_machine(header) == "riscv64");
}

TEST_CASE("compile time per kernel and pool throughput", "[compiler][timing]") {
  auto matmul = [](const char* triple, int mr, int nr) {
    CompileRequest request;
    request.source.file_name = "matmul.c";
    request.source.text = kMatmul;
    request.source.defines = {{"MR", std::to_string(mr)}, {"NR", std::to_string(nr)}, {"KC", "256"}};
    request.target = parse_target(triple);
    return request;
  };
  std::vector<CompileRequest> requests;
  for (int mr : {2, 4, 6, 8})
    for (int nr : {8, 16, 32}) requests.push_back(matmul("x86_64-linux-gnu", mr, nr));

  Compiler serial({.threads = 1});
  auto start = std::chrono::steady_clock::now();
  double sum_ms = 0;
  for (const CompileRequest& request : requests) {
    const CompileResult result = serial.compile(request);
    REQUIRE(result.ok);
    sum_ms += result.compile_ms;
  }
  const double serial_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  Compiler pool({.threads = 2});
  for (CompileRequest& request : requests) request.source.defines.push_back({"POOL", "1"});  // no cache hits
  start = std::chrono::steady_clock::now();
  for (const CompileResult& result : pool.compile_all(requests)) REQUIRE(result.ok);
  const double pool_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const double n = static_cast<double>(requests.size());
  WARN("tiled matmul -O2 x86_64 (compile + link): " << sum_ms / n << " ms per kernel on 1 thread; "
       << n / serial_s << " kernels/s on 1 thread, " << n / pool_s << " kernels/s on 2 threads");
}
