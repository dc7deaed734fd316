// The in-process C compiler: the clang driver turns ordinary flags into a cc1 command
// line, a CompilerInstance of our own runs EmitObjAction into a memory buffer. The
// kernel source and the kernel ABI header live in an in-memory file system laid over
// the real one (which supplies clang's freestanding resource headers).
#include "frontend.h"

#include <chrono>
#include <mutex>
#include <optional>

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/Basic/Version.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Driver/Compilation.h>
#include <clang/Driver/Driver.h>
#include <clang/Driver/Job.h>
#include <clang/Driver/Tool.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/PassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CrashRecoveryContext.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>

#include "abi_header.h"

namespace kestrel::embedded {
std::string_view kernel_math_h();  // host/CMakeLists.txt: kestrel_embed
}  // namespace kestrel::embedded

namespace kestrel::host::detail {

std::vector<KernelHeader> kernel_headers() { return {{"kestrel/kernel/math.h", embedded::kernel_math_h()}}; }

namespace {

// The clang the driver believes it is: it derives the resource directory (stddef.h,
// stdint.h) from this path.
constexpr const char* kClangPath = KESTREL_CLANG_PATH;
// Where the ABI header appears to the compiler; never on disk.
constexpr const char* kAbiIncludeDir = "/kestrel-abi";

// Driver flags per architecture for the target's CPU (or the generic baseline).
void add_arch_flags(const Target& target, std::vector<std::string>& args) {
  const std::string& cpu = target.cpu;
  if (target.triple.starts_with("x86_64")) {
    if (!cpu.empty()) args.push_back("-march=" + cpu);
  } else if (target.triple.starts_with("aarch64")) {
    if (!cpu.empty()) args.push_back("-mcpu=" + cpu);
  } else if (target.triple.starts_with("armv7a")) {
    args.emplace_back("-mfloat-abi=hard");
    // With a CPU, its own FPU (e.g. neon-vfpv4 on Cortex-A7, with FMA); without one,
    // ARMv7-A's NEON baseline.
    if (cpu.empty()) args.emplace_back("-mfpu=neon");
    else args.push_back("-mcpu=" + cpu);
  } else if (target.triple.starts_with("riscv64")) {
    // An ISA string ("rv64gcv") is an -march; anything else names a core.
    if (cpu.empty()) args.emplace_back("-march=rv64gc");
    else if (cpu.starts_with("rv64")) args.push_back("-march=" + cpu);
    else args.push_back("-mcpu=" + cpu);
    args.emplace_back("-mabi=lp64d");
  }
  std::size_t start = 0;
  while (start < target.features.size()) {
    std::size_t end = target.features.find(',', start);
    if (end == std::string::npos) end = target.features.size();
    if (end > start) {
      args.insert(args.end(), {"-Xclang", "-target-feature", "-Xclang"});
      args.push_back(target.features.substr(start, end - start));
    }
    start = end + 1;
  }
}

using Clock = std::chrono::steady_clock;

// A pass that changes nothing and notes when the pipeline reached it: where the
// optimiser starts and ends inside clang's single EmitObjAction.
struct TimeMark : llvm::PassInfoMixin<TimeMark> {
  std::optional<Clock::time_point>* at;
  llvm::PreservedAnalyses run(llvm::Module&, llvm::ModuleAnalysisManager&) {
    *at = Clock::now();
    return llvm::PreservedAnalyses::all();
  }
  static bool isRequired() { return true; }  // also at -O0
};

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> plain_diagnostic_options() {
  llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> options(new clang::DiagnosticOptions);
  options->ShowColors = false;
  return options;
}

// Everything compile_object does, on the calling thread; may crash only where clang does.
void compile(const ops::KernelSource& source, const Target& target, int opt_level,
             ObjectFile& out, llvm::raw_ostream& diagnostics) {
  const Clock::time_point start = Clock::now();
  const std::string name = source_name(source);

  // The source at /<name> (the working directory is "/", so diagnostics say just
  // "<name>:line:col"), the ABI header under kAbiIncludeDir.
  llvm::IntrusiveRefCntPtr<llvm::vfs::InMemoryFileSystem> memory(new llvm::vfs::InMemoryFileSystem);
  memory->addFile("/" + name, 0, llvm::MemoryBuffer::getMemBufferCopy(source.text, name));
  memory->addFile(std::string(kAbiIncludeDir) + "/kestrel/kernel/abi.h", 0,
                  llvm::MemoryBuffer::getMemBuffer(abi_header_text(), "abi.h",
                                                   /*RequiresNullTerminator=*/true));
  for (const KernelHeader& header : kernel_headers()) {
    memory->addFile(std::string(kAbiIncludeDir) + "/" + std::string(header.path), 0,
                    llvm::MemoryBuffer::getMemBufferCopy(header.text, std::string(header.path)));
  }
  llvm::IntrusiveRefCntPtr<llvm::vfs::OverlayFileSystem> files(
      new llvm::vfs::OverlayFileSystem(llvm::vfs::createPhysicalFileSystem()));
  files->pushOverlay(memory);
  if (files->setCurrentWorkingDirectory("/")) {
    diagnostics << "kestrel: cannot set up the compiler's file system\n";
    return;
  }

  // Driver: ordinary flags -> one cc1 job.
  llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> driver_options = plain_diagnostic_options();
  clang::TextDiagnosticPrinter driver_printer(diagnostics, driver_options.get());
  driver_printer.setPrefix("clang");
  clang::DiagnosticsEngine driver_diagnostics(new clang::DiagnosticIDs, driver_options,
                                              &driver_printer, /*ShouldOwnClient=*/false);
  const std::vector<std::string> args = driver_arguments(source, target, opt_level);
  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const std::string& arg : args) argv.push_back(arg.c_str());

  clang::driver::Driver driver(kClangPath, target.triple, driver_diagnostics, "kestrel", files);
  std::unique_ptr<clang::driver::Compilation> compilation(driver.BuildCompilation(argv));
  if (!compilation || driver_diagnostics.hasErrorOccurred()) return;
  const clang::driver::JobList& jobs = compilation->getJobs();
  if (jobs.size() != 1 || !llvm::isa<clang::driver::Command>(*jobs.begin()) ||
      llvm::StringRef(jobs.begin()->getCreator().getName()) != "clang") {
    diagnostics << "kestrel: the clang driver did not produce exactly one compile job\n";
    return;
  }
  const llvm::opt::ArgStringList& cc1 = jobs.begin()->getArguments();
  auto invocation = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(*invocation, cc1, driver_diagnostics, kClangPath) ||
      driver_diagnostics.hasErrorOccurred())
    return;
  invocation->getDiagnosticOpts().ShowColors = false;
  std::optional<Clock::time_point> optimiser_start, optimiser_end;
  invocation->getCodeGenOpts().PassBuilderCallbacks.push_back([&](llvm::PassBuilder& passes) {
    passes.registerPipelineStartEPCallback([&](llvm::ModulePassManager& pm, llvm::OptimizationLevel) {
      pm.addPass(TimeMark{{}, &optimiser_start});
    });
    passes.registerOptimizerLastEPCallback([&](llvm::ModulePassManager& pm, llvm::OptimizationLevel) {
      pm.addPass(TimeMark{{}, &optimiser_end});
    });
  });

  // Frontend + backend: one CompilerInstance, object into memory.
  clang::CompilerInstance compiler;
  compiler.setInvocation(std::move(invocation));
  compiler.createDiagnostics(new clang::TextDiagnosticPrinter(diagnostics, &compiler.getDiagnosticOpts()),
                             /*ShouldOwnClient=*/true);
  compiler.setVerboseOutputStream(diagnostics);  // "1 error generated."
  compiler.createFileManager(files);
  llvm::SmallVector<char, 0> object;
  compiler.setOutputStream(std::make_unique<llvm::raw_svector_ostream>(object));
  llvm::LLVMContext context;
  clang::EmitObjAction action(&context);
  const bool ok = compiler.ExecuteAction(action) && !compiler.getDiagnostics().hasErrorOccurred();
  compiler.clearOutputFiles(/*EraseFiles=*/false);
  const Clock::time_point end = Clock::now();
  if (optimiser_start && optimiser_end) {
    out.frontend_ms = ms_between(start, *optimiser_start);
    out.optimise_ms = ms_between(*optimiser_start, *optimiser_end);
    out.codegen_ms = ms_between(*optimiser_end, end);
  } else {
    out.frontend_ms = ms_between(start, end);  // stopped before the optimiser (an error)
  }
  if (ok && !object.empty()) {
    out.bytes.assign(object.begin(), object.end());
    out.ok = true;
  }
}

}  // namespace

void initialize_llvm() {
  // LLVM's target registry and crash recovery are process-wide by nature.
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeX86AsmParser();
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64Target();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64AsmPrinter();
    LLVMInitializeAArch64AsmParser();
    LLVMInitializeARMTargetInfo();
    LLVMInitializeARMTarget();
    LLVMInitializeARMTargetMC();
    LLVMInitializeARMAsmPrinter();
    LLVMInitializeARMAsmParser();
    LLVMInitializeRISCVTargetInfo();
    LLVMInitializeRISCVTarget();
    LLVMInitializeRISCVTargetMC();
    LLVMInitializeRISCVAsmPrinter();
    LLVMInitializeRISCVAsmParser();
    // Signal handlers that turn a crash (or LLD's fatal(), which otherwise calls exit)
    // inside a CrashRecoveryContext into a return; elsewhere they re-raise the signal
    // to the handlers that were installed before.
    llvm::CrashRecoveryContext::Enable();
  });
}

std::string source_name(const ops::KernelSource& source) {
  std::string name = source.file_name.substr(source.file_name.find_last_of('/') + 1);
  if (name.empty() || name == "." || name == "..") name = "kernel.c";
  return name;
}

std::vector<std::string> driver_arguments(const ops::KernelSource& source, const Target& target,
                                          int opt_level) {
  std::vector<std::string> args = {
      kClangPath,
      "--no-default-config",  // no clang.cfg from the installation or the user
      "--target=" + target.triple,
      "-O" + std::to_string(opt_level),
      "-ffreestanding",
      "-nostdlibinc",
      "-fPIC",
      "-fvisibility=hidden",
      // Freestanding code has no errno: sqrtf and friends become instructions, never calls
      // into a libm the kernel's process may not have loaded.
      "-fno-math-errno",
      "-fno-color-diagnostics",
      "-c",
      std::string("-I") + kAbiIncludeDir,
  };
  add_arch_flags(target, args);
  // AArch64 atomics inline (LSE or LL/SC), not as calls to libgcc's __aarch64_* helpers,
  // which a freestanding module has nothing to resolve against.
  if (target.triple.starts_with("aarch64")) args.emplace_back("-mno-outline-atomics");
  for (const ops::Define& define : source.defines) args.push_back("-D" + define.name + "=" + define.value);
  args.insert(args.end(), {"-x", "c", source_name(source)});
  return args;
}

ObjectFile compile_object(const ops::KernelSource& source, const Target& target, int opt_level) {
  initialize_llvm();
  ObjectFile out;
  llvm::raw_string_ostream diagnostics(out.diagnostics);
  llvm::CrashRecoveryContext recovery;
  if (!recovery.RunSafely([&] { compile(source, target, opt_level, out, diagnostics); })) {
    out.ok = false;
    out.bytes.clear();
    diagnostics << "kestrel: clang crashed compiling " << source_name(source) << " for "
                << target.to_string() << "\n";
  }
  diagnostics.flush();
  return out;
}

std::string clang_full_version() { return clang::getClangFullVersion(); }

}  // namespace kestrel::host::detail
