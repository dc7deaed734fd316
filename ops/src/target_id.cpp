// A target's identity and its text (see target_id.h).
#include "kestrel/ops/target_id.h"

#include <charconv>

namespace kestrel::ops {

std::string TargetId::to_string() const {
  if (is_gpu()) {
    std::string out(ops::to_string(backend));
    if (!gpu_arch.empty()) out += " " + gpu_arch;
    if (gpu_index != 0) out += " #" + std::to_string(gpu_index);
    return out;
  }
  std::string out = triple;
  if (!cpu.empty() || !features.empty()) {
    out += " (";
    out += cpu;
    if (!cpu.empty() && !features.empty()) out += ", ";
    out += features;
    out += ")";
  }
  return out;
}

std::optional<TargetId> TargetId::parse(std::string_view text) {
  if (text.empty()) return std::nullopt;
  TargetId id;
  for (ops::Backend gpu : {ops::Backend::cuda, ops::Backend::opencl}) {
    const std::string_view name = ops::to_string(gpu);
    if (text.substr(0, name.size()) != name || (text.size() > name.size() && text[name.size()] != ' ')) continue;
    id.backend = gpu;
    std::string_view rest = text.substr(name.size());
    while (!rest.empty()) {
      rest.remove_prefix(1);  // the space
      const std::string_view word = rest.substr(0, rest.find(' '));
      rest.remove_prefix(word.size());
      if (word.empty()) return std::nullopt;
      if (word.front() == '#') {
        const auto [end, ec] = std::from_chars(word.data() + 1, word.data() + word.size(), id.gpu_index);
        if (ec != std::errc() || end != word.data() + word.size()) return std::nullopt;
      } else if (id.gpu_arch.empty()) {
        id.gpu_arch = std::string(word);
      } else {
        return std::nullopt;
      }
    }
    return id;
  }
  std::string_view triple = text;
  if (const std::size_t open = text.find(" ("); open != std::string_view::npos) {
    if (text.back() != ')') return std::nullopt;
    triple = text.substr(0, open);
    const std::string_view inner = text.substr(open + 2, text.size() - open - 3);
    if (const std::size_t comma = inner.find(", "); comma != std::string_view::npos) {
      id.cpu = std::string(inner.substr(0, comma));
      id.features = std::string(inner.substr(comma + 2));
    } else if (!inner.empty() && (inner.front() == '+' || inner.front() == '-')) {
      id.features = std::string(inner);
    } else {
      id.cpu = std::string(inner);
    }
  }
  if (triple.empty()) return std::nullopt;
  id.triple = std::string(triple);
  return id;
}

}  // namespace kestrel::ops
