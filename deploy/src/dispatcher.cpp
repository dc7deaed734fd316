// The generated C of an exported kernel library (see dispatcher.h and docs/export.md).
// Everything generated is freestanding C: the library needs no C library.
#include "dispatcher.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace kestrel::deploy::detail {

using model::DynamicParam;

namespace {

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// A C identifier from a name ("conv2d_nchwc" stays, anything else becomes '_').
std::string identifier(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

// A C string literal.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string join(const std::vector<std::int64_t>& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]) + "LL";
  return out;
}

std::string param_names(const ops::Op& op) {
  std::string out;
  for (const ops::ParamSpec& p : op.params()) out += (out.empty() ? "" : ",") + p.name;
  return out;
}

// The declarations the header and the dispatcher share.
std::string declarations(const std::vector<TableEntry>& entries, bool with_comments) {
  std::ostringstream out;
  out << "#define KESTREL_NO_KERNEL (-1)\n\n";
  if (with_comments)
    out << "/* Runs the kernel for `op` and `params` (the op's parameters in its order, optional ones at\n"
           " * their fallback when unused; see KESTREL_<OP>_PARAMS) on `args` (the op's tensors, output\n"
           " * last, each {data, element count}). Returns 0, KESTREL_NO_KERNEL (no kernel in this library\n"
           " * for that op and shape) or the kernel's error code. */\n";
  out << "int32_t kestrel_dispatch(const kestrel_services* svc, const char* op, const int64_t* params,\n"
         "                         int32_t num_params, const kestrel_arg* args, int32_t num_args);\n";
  if (with_comments)
    out << "/* Which kernel kestrel_dispatch would run: \"tuned <config>\", \"default <config>\",\n"
           " * \"bucket <symbol>=<value> tuned <config>\" ..., or NULL (none). */\n";
  out << "const char* kestrel_dispatch_which(const char* op, const int64_t* params, int32_t num_params);\n\n";
  for (const ops::Op* op : ops_of(entries)) {
    const std::string name = identifier(std::string(op->name()));
    if (with_comments) {
      std::string description(op->description());
      for (std::size_t at; (at = description.find("*/")) != std::string::npos;) description.replace(at, 2, "* /");
      out << "/* " << op->name() << ": " << description << "\n";
      // The tensors of the op's first kernel (an epilogue adds tensors: bias, residual).
      for (const TableEntry& e : entries) {
        if (e.op != op) continue;
        out << " * tensors (args, in order) of " << ops::format_params(e.kernel.params) << ":";
        for (const ops::TensorSpec& t : op->tensors(e.kernel.params))
          out << " " << t.name << (t.role == ops::Role::output ? " (output)" : "");
        break;
      }
      out << " */\n";
      out << "#define KESTREL_" << upper(name) << "_PARAMS " << quoted(param_names(*op)) << "\n";
    }
    out << "typedef struct kestrel_" << name << "_shape {";
    for (const ops::ParamSpec& p : op->params()) out << " int64_t " << identifier(p.name) << ";";
    out << " } kestrel_" << name << "_shape;\n";
    out << "int32_t kestrel_" << name << "(const kestrel_services* svc, const kestrel_" << name
        << "_shape* shape, const kestrel_arg* args, int32_t num_args);\n";
    out << "const char* kestrel_" << name << "_which(const kestrel_" << name << "_shape* shape);\n\n";
  }
  return out.str();
}

}  // namespace

std::vector<const ops::Op*> ops_of(const std::vector<TableEntry>& entries) {
  std::vector<const ops::Op*> out;
  for (const TableEntry& e : entries)
    if (std::find(out.begin(), out.end(), e.op) == out.end()) out.push_back(e.op);
  return out;
}

void make_kernel_source(TableEntry& entry, ops::KernelSource& source, std::vector<std::string>& unsupported) {
  const std::string& name = entry.kernel.entry;
  const std::vector<ops::ParamSpec> specs = entry.op->params();
  std::string prefix = "#include <stdint.h>\n";
  std::string setters;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (entry.multipliers[i] == 0) continue;
    const std::string suffix = "_" + upper(specs[i].name);
    std::vector<ops::Define*> found;
    for (ops::Define& d : source.defines)
      if (d.name.size() > suffix.size() && d.name.ends_with(suffix)) found.push_back(&d);
    if (found.size() != 1) {
      unsupported.push_back(std::string(entry.op->name()) + " " + specs[i].name + ": " +
                            (found.empty() ? "its kernel has no #define for it" : "its kernel has several #defines for it") +
                            ", so it is compiled at " + std::to_string(entry.params[i]) + " only");
      entry.multipliers[i] = 0;
      std::erase_if(entry.kernel.dynamic, [&](const DynamicParam& d) { return d.param == specs[i].name; });
      continue;
    }
    const std::string variable = name + "_" + identifier(specs[i].name);
    prefix += "static int64_t " + variable + " = " + found[0]->value + ";\n";
    found[0]->value = variable;
    setters += "  " + variable + " = params[" + std::to_string(i) + "];\n";
  }
  if (std::all_of(entry.multipliers.begin(), entry.multipliers.end(), [](std::int64_t m) { return m == 0; }))
    entry.symbol.clear();
  source.defines.push_back({"KESTREL_KERNEL_NAME", name + "_impl"});
  std::ostringstream wrapper;
  wrapper << "\n/* kestrel export: the library's entry for this kernel. */\n";
  if (!setters.empty()) wrapper << "static int " << name << "_lock;\n";
  wrapper << "int32_t " << name
          << "(const kestrel_services* svc, const int64_t* params, const kestrel_arg* args, int32_t num_args) {\n";
  if (setters.empty()) {
    wrapper << "  (void)params;\n  return " << name << "_impl(svc, args, num_args);\n}\n";
  } else {
    // One call at a time: the run-time parameters live in file-scope variables.
    wrapper << "  while (__atomic_exchange_n(&" << name << "_lock, 1, __ATOMIC_ACQUIRE)) {\n"
            << "    while (__atomic_load_n(&" << name << "_lock, __ATOMIC_RELAXED)) {}\n  }\n"
            << setters << "  int32_t status = " << name << "_impl(svc, args, num_args);\n"
            << "  __atomic_store_n(&" << name << "_lock, 0, __ATOMIC_RELEASE);\n  return status;\n}\n";
  }
  source.text = prefix + "#line 1\n" + source.text + wrapper.str();
}

std::string dispatcher_source(const std::vector<TableEntry>& entries) {
  std::ostringstream out;
  out << "/* Generated by kestrel export: the kernel table and the dispatcher. */\n"
         "#include \"kestrel/kernel/abi.h\"\n\n"
         "#define KESTREL_API __attribute__((visibility(\"default\")))\n"
      << declarations(entries, false)
      << "typedef int32_t (*kestrel_entry_fn)(const kestrel_services*, const int64_t*, const kestrel_arg*, int32_t);\n"
         "typedef struct kestrel_entry {\n"
         "  const char* op;\n  int32_t num_params;\n  const int64_t* params;\n"
         "  int32_t min_params;         /* a caller may leave out the optional parameters after these */\n"
         "  const int64_t* fallbacks;   /* what a left-out parameter stands for */\n"
         "  const int64_t* multipliers; /* 0: static; else params[i] = multipliers[i] * symbol */\n"
         "  int64_t bucket;             /* the symbol's value compiled for; 0: no dynamic param */\n"
         "  const char* which;\n  const char* bucket_which;\n  kestrel_entry_fn fn;\n"
         "} kestrel_entry;\n\n";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const TableEntry& e = entries[i];
    out << "int32_t " << e.kernel.entry
        << "(const kestrel_services*, const int64_t*, const kestrel_arg*, int32_t);\n";
    out << "static const int64_t kestrel_params_" << i << "[] = {" << join(e.params) << "};\n";
    out << "static const int64_t kestrel_mult_" << i << "[] = {" << join(e.multipliers) << "};\n";
  }
  // Per op, the parameters' fallbacks and how many a caller must give: the optional ones
  // at the end may be left out, so a program written before an op gained one (softmax's
  // nan_zero) still finds its kernels.
  std::size_t max_params = 1;
  for (const ops::Op* op : ops_of(entries)) {
    const std::vector<ops::ParamSpec> specs = op->params();
    std::vector<std::int64_t> fallbacks;
    for (const auto& spec : specs) fallbacks.push_back(spec.fallback);
    out << "static const int64_t kestrel_fallbacks_" << identifier(std::string(op->name())) << "[] = {" << join(fallbacks)
        << "};\n";
    max_params = std::max(max_params, specs.size());
  }
  out << "#define KESTREL_MAX_PARAMS " << max_params << "\n";
  out << "\nstatic const kestrel_entry kestrel_table[] = {\n";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const TableEntry& e = entries[i];
    const std::string which = e.kernel.origin + " " + e.kernel.config;
    const std::string bucket_which =
        e.symbol.empty() ? which : "bucket " + e.symbol + "=" + std::to_string(e.bucket) + " " + which;
    const std::vector<ops::ParamSpec> specs = e.op->params();
    std::size_t min_params = specs.size();
    while (min_params > 0 && specs[min_params - 1].optional) --min_params;
    out << "  {" << quoted(std::string(e.op->name())) << ", " << e.params.size() << ", kestrel_params_" << i << ", "
        << min_params << ", kestrel_fallbacks_" << identifier(std::string(e.op->name())) << ", kestrel_mult_" << i
        << ", " << (e.symbol.empty() ? 0 : e.bucket) << "LL, " << quoted(which) << ", " << quoted(bucket_which) << ", "
        << e.kernel.entry << "},\n";
  }
  out << "};\n#define KESTREL_TABLE_SIZE " << entries.size() << "\n\n";
  out << R"C(static int kestrel_same(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

/* Exact match of every parameter first; else among the op's kernels with dynamic
 * parameters whose static parameters match and whose dynamic ones give one symbol value:
 * the smallest bucket >= that value, else the largest bucket. */
/* Parameter i as the caller gave it, or its fallback when the caller left it out. */
static int64_t kestrel_param(const kestrel_entry* e, const int64_t* params, int32_t num_params, int32_t i) {
  return i < num_params ? params[i] : e->fallbacks[i];
}

static int kestrel_takes(const kestrel_entry* e, const char* op, int32_t num_params) {
  return num_params >= e->min_params && num_params <= e->num_params && kestrel_same(e->op, op);
}

static const kestrel_entry* kestrel_find(const char* op, const int64_t* params, int32_t num_params, int* bucketed) {
  *bucketed = 0;
  if (!op || (num_params > 0 && !params)) return 0;
  for (int t = 0; t < KESTREL_TABLE_SIZE; ++t) {
    const kestrel_entry* e = &kestrel_table[t];
    if (!kestrel_takes(e, op, num_params)) continue;
    int same = 1;
    for (int32_t i = 0; i < e->num_params && same; ++i) same = e->params[i] == kestrel_param(e, params, num_params, i);
    if (same) return e;
  }
  const kestrel_entry* best = 0;
  const kestrel_entry* largest = 0;
  for (int t = 0; t < KESTREL_TABLE_SIZE; ++t) {
    const kestrel_entry* e = &kestrel_table[t];
    if (e->bucket == 0 || !kestrel_takes(e, op, num_params)) continue;
    int64_t symbol = -1;
    int fits = 1;
    for (int32_t i = 0; i < e->num_params && fits; ++i) {
      const int64_t m = e->multipliers[i];
      const int64_t v = kestrel_param(e, params, num_params, i);
      if (m == 0) {
        fits = e->params[i] == v;
      } else if (v <= 0 || v % m != 0) {
        fits = 0;
      } else if (symbol < 0) {
        symbol = v / m;
      } else {
        fits = symbol == v / m;
      }
    }
    if (!fits) continue;
    if (e->bucket >= symbol && (!best || e->bucket < best->bucket)) best = e;
    if (!largest || e->bucket > largest->bucket) largest = e;
  }
  *bucketed = 1;
  return best ? best : largest;
}

#if defined(__arm__)
/* 32-bit ARM has no 64-bit divide instruction: compilers call the run-time ABI's
 * __aeabi_ldivmod / __aeabi_uldivmod (libgcc, compiler-rt), which a freestanding library
 * must bring itself (kernels with run-time sizes divide by them). Hidden: the library's own. */
__attribute__((visibility("hidden"))) uint64_t kestrel_udivmod64(uint64_t n, uint64_t d, uint64_t* rem) {
  uint64_t q = 0, r = 0;
  if (d == 0) {
    *rem = n;
    return 0;
  }
  for (int bit = 63; bit >= 0; --bit) {
    r = (r << 1) | ((n >> bit) & 1);
    if (r >= d) {
      r -= d;
      q |= (uint64_t)1 << bit;
    }
  }
  *rem = r;
  return q;
}
__attribute__((visibility("hidden"))) int64_t kestrel_divmod64(int64_t n, int64_t d, int64_t* rem) {
  const uint64_t un = n < 0 ? 0 - (uint64_t)n : (uint64_t)n;
  const uint64_t ud = d < 0 ? 0 - (uint64_t)d : (uint64_t)d;
  uint64_t ur;
  const uint64_t uq = kestrel_udivmod64(un, ud, &ur);
  *rem = n < 0 ? (int64_t)(0 - ur) : (int64_t)ur;      /* the dividend's sign */
  return (n < 0) != (d < 0) ? (int64_t)(0 - uq) : (int64_t)uq; /* toward zero */
}
/* n in r0:r1, d in r2:r3; quotient back in r0:r1, remainder in r2:r3. */
#define KESTREL_AEABI_DIVMOD(name, helper)                                             \
  __attribute__((naked, weak, visibility("hidden"))) void name(void) {                  \
    __asm__ volatile("push {r4, lr}\n"                                                   \
                     "sub sp, sp, #16\n"                                                 \
                     "add r4, sp, #8\n"                                                  \
                     "str r4, [sp]\n"                                                    \
                     "bl " #helper "\n"                                                  \
                     "ldr r2, [sp, #8]\n"                                                \
                     "ldr r3, [sp, #12]\n"                                               \
                     "add sp, sp, #16\n"                                                 \
                     "pop {r4, pc}\n");                                                  \
  }
KESTREL_AEABI_DIVMOD(__aeabi_uldivmod, kestrel_udivmod64)
KESTREL_AEABI_DIVMOD(__aeabi_ldivmod, kestrel_divmod64)
#endif

KESTREL_API int32_t kestrel_dispatch(const kestrel_services* svc, const char* op, const int64_t* params,
                                     int32_t num_params, const kestrel_arg* args, int32_t num_args) {
  int bucketed;
  const kestrel_entry* e = kestrel_find(op, params, num_params, &bucketed);
  if (!e) return KESTREL_NO_KERNEL;
  if (num_params < e->num_params) {
    /* The kernel reads its run-time parameters by position: the left-out ones filled in. */
    int64_t full[KESTREL_MAX_PARAMS];
    for (int32_t i = 0; i < e->num_params; ++i) full[i] = kestrel_param(e, params, num_params, i);
    return e->fn(svc, full, args, num_args);
  }
  return e->fn(svc, params, args, num_args);
}

KESTREL_API const char* kestrel_dispatch_which(const char* op, const int64_t* params, int32_t num_params) {
  int bucketed;
  const kestrel_entry* e = kestrel_find(op, params, num_params, &bucketed);
  if (!e) return 0;
  return bucketed ? e->bucket_which : e->which;
}
)C";
  for (const ops::Op* op : ops_of(entries)) {
    const std::string name = identifier(std::string(op->name()));
    const std::vector<ops::ParamSpec> specs = op->params();
    std::string fill = "  const int64_t params[" + std::to_string(specs.size()) + "] = {";
    for (std::size_t i = 0; i < specs.size(); ++i) fill += (i ? ", " : "") + std::string("shape->") + identifier(specs[i].name);
    fill += "};\n";
    out << "\nKESTREL_API int32_t kestrel_" << name << "(const kestrel_services* svc, const kestrel_" << name
        << "_shape* shape, const kestrel_arg* args, int32_t num_args) {\n  if (!shape) return KESTREL_NO_KERNEL;\n"
        << fill << "  return kestrel_dispatch(svc, " << quoted(std::string(op->name())) << ", params, "
        << specs.size() << ", args, num_args);\n}\n";
    out << "KESTREL_API const char* kestrel_" << name << "_which(const kestrel_" << name
        << "_shape* shape) {\n  if (!shape) return 0;\n"
        << fill << "  return kestrel_dispatch_which(" << quoted(std::string(op->name())) << ", params, " << specs.size()
        << ");\n}\n";
  }
  return out.str();
}

std::string library_header(const std::vector<TableEntry>& entries) {
  std::ostringstream out;
  out << "/* Generated by kestrel export: the C interface of libkestrel_kernels (see docs/export.md).\n"
         " * Link libkestrel_kernels.{so,a} and libkestrel_rt.{so,a}; create the services with\n"
         " * kestrel_runtime_create (kestrel_runtime.h). */\n"
         "#ifndef KESTREL_KERNELS_H\n#define KESTREL_KERNELS_H\n\n"
         "#include \"kestrel_abi.h\"\n#include \"kestrel_runtime.h\"\n\n"
         "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
      << declarations(entries, true) << "/* Kernels in this library:\n";
  for (const TableEntry& e : entries) {
    out << " *   " << e.op->name() << " " << ops::format_params(e.kernel.params);
    for (const DynamicParam& d : e.kernel.dynamic)
      out << " [" << d.param << " = " << (d.multiplier == 1 ? "" : std::to_string(d.multiplier) + "*") << d.symbol << "]";
    out << ": " << e.kernel.origin << " " << e.kernel.config << "\n";
  }
  out << " */\n\n#ifdef __cplusplus\n}\n#endif\n\n#endif /* KESTREL_KERNELS_H */\n";
  return out.str();
}

}  // namespace kestrel::deploy::detail
