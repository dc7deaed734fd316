// The .kcm file of a cross-workload model: JSON with every (op, target class) model, what
// it trained on, its held-out quality and its XGBoost booster (UBJSON, base64). Saved
// atomically; loaded strictly: a file this Kestrel would misread is refused, never used.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "cross_model_impl.h"
#include "kestrel/host/version.h"
#include "kestrel/ops/op.h"

namespace kestrel::tuner {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kFormat = "kestrel-cost-model";
constexpr const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(v >> shift) & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// Empty optional on a character outside the alphabet or a length not a multiple of 4.
std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    unsigned v = 0;
    int padding = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      unsigned digit = 0;
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        ++padding;
      } else if (const char* at = std::strchr(kAlphabet, c); at && c != '\0' && padding == 0) {
        digit = static_cast<unsigned>(at - kAlphabet);
      } else {
        return std::nullopt;
      }
      v = (v << 6) | digit;
    }
    out += static_cast<char>((v >> 16) & 255);
    if (padding < 2) out += static_cast<char>((v >> 8) & 255);
    if (padding < 1) out += static_cast<char>(v & 255);
  }
  return out;
}

json quality_json(const RankingQuality& q) {
  return {{"workloads", q.workloads},
          {"top1_recall", q.top1_recall},
          {"top5_recall", q.top5_recall},
          {"kendall_tau", q.kendall_tau},
          {"pick_ratio", q.pick_ratio}};
}

RankingQuality quality_from(const json& j) {
  RankingQuality q;
  q.workloads = j.at("workloads").get<std::size_t>();
  q.top1_recall = j.at("top1_recall").get<double>();
  q.top5_recall = j.at("top5_recall").get<double>();
  q.kendall_tau = j.at("kendall_tau").get<double>();
  q.pick_ratio = j.at("pick_ratio").get<double>();
  return q;
}

json limits_json(const std::vector<std::pair<std::string, float>>& limits) {
  json out = json::object();
  for (const auto& [name, value] : limits) out[name] = value;
  return out;
}

json by_class_json(const std::vector<std::pair<std::string, RankingQuality>>& by_class) {
  json out = json::object();
  for (const auto& [cls, q] : by_class) out[cls] = quality_json(q);
  return out;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void CrossModel::save(const std::string& path) const {
  json models = json::array();
  for (const auto& e : impl_->entries) {
    const OpModelInfo& info = e.info;
    models.push_back({{"op", info.op},
                      {"target_class", info.target_class},
                      {"trained_classes", info.trained_classes},
                      {"feature_names", info.feature_names},
                      {"rows", info.rows},
                      {"workloads", info.workloads},
                      {"trained_workloads", info.trained_workloads},
                      {"exemplars", info.exemplars},
                      {"register_limits", limits_json(info.register_limits)},
                      {"holdout", quality_json(info.holdout)},
                      {"holdout_by_class", by_class_json(info.holdout_by_class)},
                      {"probe", {{"workload", ops::format_params(e.probe_workload)},
                                 {"config", ops::format_config(e.probe_config)}}},
                      {"booster_format", "ubj"},
                      {"booster", base64_encode(e.booster->save_to_buffer())}});
  }
  const json file = {{"format", kFormat},
                     {"file_version", kModelFileVersion},
                     {"feature_schema", kFeatureSchemaVersion},
                     {"kestrel_version", host::version_text()},
                     {"created_unix_ms", now_unix_ms()},
                     {"models", std::move(models)}};
  const std::string text = file.dump(1) + "\n";

  // A temporary file beside the target, renamed over it: readers see the old file or
  // the whole new one, and a failure leaves nothing behind.
  const fs::path target(path);
  const fs::path tmp = target.parent_path() / ("." + target.filename().string() + ".tmp" + std::to_string(::getpid()));
  auto fail = [&](const std::string& why) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw ModelFileError("cannot write model file '" + path + "': " + why);
  };
  if (target.filename().empty()) fail("not a file name");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) fail(std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) fail(ec.message());
}

CrossModel CrossModel::load(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ModelFileError("no model file at '" + path + "'");
  if (!fs::is_regular_file(path, ec)) throw ModelFileError("'" + path + "' is not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFileError("cannot read model file '" + path + "': " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  json file;
  try {
    file = json::parse(buffer.str());
  } catch (const json::exception&) {
    throw ModelFileError("'" + path + "' is not a kestrel cost model (not JSON)");
  }
  if (!file.is_object() || file.value("format", json()) != kFormat) {
    throw ModelFileError("'" + path + "' is not a kestrel cost model (no \"format\": \"" + kFormat + "\")");
  }
  const std::string retrain = ": retrain with kestrel cost-model train";
  CrossModel out;
  try {
    const int version = file.at("file_version").get<int>();
    if (version > kModelFileVersion) {
      throw ModelFileError("model file '" + path + "' was written by a newer Kestrel (file version " +
                           std::to_string(version) + ", this one reads up to " + std::to_string(kModelFileVersion) +
                           ")");
    }
    const int schema = file.at("feature_schema").get<int>();
    if (schema != kFeatureSchemaVersion) {
      throw ModelFileError("model file '" + path + "' was trained on feature schema " + std::to_string(schema) +
                           ", this Kestrel computes schema " + std::to_string(kFeatureSchemaVersion) + retrain);
    }
    const ops::Registry registry = ops::builtin_ops();
    for (const json& m : file.at("models")) {
      CrossModel::Impl::Entry e;
      e.info.op = m.at("op").get<std::string>();
      e.info.target_class = m.at("target_class").get<std::string>();
      e.info.feature_names = m.at("feature_names").get<std::vector<std::string>>();
      e.info.rows = m.at("rows").get<std::size_t>();
      e.info.workloads = m.at("workloads").get<std::size_t>();
      e.info.trained_workloads = m.at("trained_workloads").get<std::vector<std::string>>();
      if (m.contains("exemplars")) e.info.exemplars = m.at("exemplars").get<std::vector<std::string>>();
      e.info.holdout = quality_from(m.at("holdout"));
      // Files of models trained before families were pooled name one class.
      e.info.trained_classes = m.contains("trained_classes")
                                   ? m.at("trained_classes").get<std::vector<std::string>>()
                                   : std::vector<std::string>{e.info.target_class};
      // Files without them (older ones) bound nothing.
      if (m.contains("register_limits")) {
        for (const auto& [name, value] : m.at("register_limits").items()) {
          if (std::find(e.info.feature_names.begin(), e.info.feature_names.end(), name) == e.info.feature_names.end()) {
            throw ModelFileError("model file '" + path + "' is damaged: a register limit names '" + name +
                                 "', not one of its features");
          }
          e.info.register_limits.emplace_back(name, value.get<float>());
        }
      }
      if (m.contains("holdout_by_class")) {
        for (const auto& [cls, q] : m.at("holdout_by_class").items()) {
          e.info.holdout_by_class.emplace_back(cls, quality_from(q));
        }
      }
      const std::string name = e.info.op + "/" + e.info.target_class;
      // The op must still compute the same features, in the same order.
      const ops::Op* op = registry.find(e.info.op, detail::backend_of_class(e.info.target_class));
      if (!op) throw ModelFileError("model file '" + path + "' has a model for " + name + ", an op this Kestrel lacks");
      std::vector<std::string> names;
      try {
        e.probe_workload = ops::parse_pairs(m.at("probe").at("workload").get<std::string>());
        e.probe_config = ops::parse_pairs(m.at("probe").at("config").get<std::string>());
        names = cross_feature_names(*op, e.probe_workload, e.probe_config, detail::traits_of_class(e.info.target_class));
      } catch (const std::exception&) {
        names.clear();  // the op no longer takes that workload or configuration
      }
      if (names != e.info.feature_names) {
        throw ModelFileError("model file '" + path + "': the " + name +
                             " model's features differ from the ones this Kestrel computes" + retrain);
      }
      if (m.at("booster_format").get<std::string>() != "ubj") {
        throw ModelFileError("model file '" + path + "': the " + name + " model's booster is in an unknown format");
      }
      const auto bytes = base64_decode(m.at("booster").get<std::string>());
      if (!bytes) throw ModelFileError("model file '" + path + "' is damaged: the " + name + " booster is not base64");
      e.booster = std::make_unique<XgboostCostModel>();
      try {
        e.booster->load_from_buffer(*bytes);
      } catch (const std::runtime_error& error) {
        throw ModelFileError("model file '" + path + "' is damaged: the " + name + " booster: " + error.what());
      }
      if (e.booster->columns() != e.info.feature_names.size()) {
        throw ModelFileError("model file '" + path + "' is damaged: the " + name + " booster has " +
                             std::to_string(e.booster->columns()) + " features, its names " +
                             std::to_string(e.info.feature_names.size()));
      }
      out.impl_->entries.push_back(std::move(e));
    }
  } catch (const json::exception& error) {
    throw ModelFileError("model file '" + path + "' is damaged: " + error.what());
  }
  if (out.impl_->entries.empty()) throw ModelFileError("model file '" + path + "' holds no models");
  out.impl_->sync_infos();
  return out;
}

}  // namespace kestrel::tuner
