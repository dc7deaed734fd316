// The inputs `kestrel run` feeds a model (model_check.h): generated integer and boolean
// inputs (a Gather's indices inside its table, masks of ones, small values, true), the
// .npz reader on the zoo's files and on corrupt copies of them, the inputs and symbol
// sizes taken from a .npz, integer outputs compared with ONNX Runtime's, and the outputs
// whose values are all equal.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <zip.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "kestrel/base/usage_error.h"
#include "kestrel/deploy/model_check.h"

using namespace kestrel;
using namespace kestrel::deploy;

namespace {

namespace fs = std::filesystem;
using Ints = std::vector<std::int64_t>;

model::ValueInfo value(const std::string& name, Ints shape, model::ElemType type = model::ElemType::f32) {
  model::ValueInfo v;
  v.name = name;
  v.type = type;
  model::Shape s;
  for (auto d : shape) s.push_back(model::Dim{d, ""});
  v.shape = s;
  return v;
}

model::Node node(std::string op, std::vector<std::string> inputs, std::string output) {
  model::Node n;
  n.op_type = op;
  n.name = op + "_" + output;
  n.inputs = std::move(inputs);
  n.outputs = {std::move(output)};
  return n;
}

std::string zoo(const std::string& file) { return std::string(KESTREL_SOURCE_DIR) + "/tests/data/zoo/" + file; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A copy of `bytes` in a temporary file, removed when this goes.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& bytes, const std::string& name) {
    path = (fs::temp_directory_path() / ("kestrel-npz-test-" + std::to_string(::getpid()) + "-" + name)).string();
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { fs::remove(path); }
};

using Entries = std::vector<std::pair<std::string, std::string>>;

// The entries of a zip archive, in order: name and bytes.
Entries entries_of(const std::string& path) {
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_RDONLY, &error);
  REQUIRE(archive != nullptr);
  Entries out;
  for (zip_int64_t e = 0; e < zip_get_num_entries(archive, 0); ++e) {
    zip_stat_t stat;
    REQUIRE(zip_stat_index(archive, static_cast<zip_uint64_t>(e), 0, &stat) == 0);
    zip_file_t* file = zip_fopen_index(archive, static_cast<zip_uint64_t>(e), 0);
    REQUIRE(file != nullptr);
    std::string bytes(static_cast<std::size_t>(stat.size), '\0');
    CHECK(zip_fread(file, bytes.data(), stat.size) == static_cast<zip_int64_t>(stat.size));
    zip_fclose(file);
    out.emplace_back(stat.name, std::move(bytes));
  }
  zip_discard(archive);
  return out;
}

// A zip archive of `entries` as bytes: stored (np.savez) or deflated (np.savez_compressed).
std::string zip_of(const Entries& entries, bool deflate) {
  const std::string path = (fs::temp_directory_path() / ("kestrel-npz-test-" + std::to_string(::getpid()) + ".zip")).string();
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  REQUIRE(archive != nullptr);
  for (const auto& [name, bytes] : entries) {
    zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    REQUIRE(source != nullptr);
    const zip_int64_t index = zip_file_add(archive, name.c_str(), source, ZIP_FL_ENC_UTF_8);
    REQUIRE(index >= 0);
    REQUIRE(zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0) == 0);
  }
  REQUIRE(zip_close(archive) == 0);  // writes the archive (the buffers must live until here)
  std::string out = read_bytes(path);
  fs::remove(path);
  return out;
}

std::string npz_error(const std::string& path) {
  try {
    read_npz(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("deploy: kestrel run's generated integer inputs follow the graph: Gather indices, masks, small values, booleans",
          "[deploy][model_check]") {
  model::Graph g;
  g.inputs = {value("input_ids", {1, 16}, model::ElemType::i64), value("attention_mask", {1, 16}, model::ElemType::i64),
              value("token_type_ids", {1, 16}, model::ElemType::i32), value("steps", {3}, model::ElemType::i64),
              value("flags", {2}, model::ElemType::other), value("x", {4})};
  g.initializers["word_embeddings"] = model::Initializer{"word_embeddings", model::ElemType::f32, {1000, 8}, {}, {}};
  g.initializers["type_embeddings"] = model::Initializer{"type_embeddings", model::ElemType::f32, {2, 8}, {}, {}};
  g.initializers["small_table"] = model::Initializer{"small_table", model::ElemType::f32, {8, 50}, {}, {}};
  g.nodes.push_back(node("Gather", {"word_embeddings", "input_ids"}, "words"));
  // Through a Cast and an Unsqueeze; two Gathers: the smaller table bounds the ids.
  g.nodes.push_back(node("Cast", {"token_type_ids"}, "tt64"));
  g.nodes.push_back(node("Unsqueeze", {"tt64", "axes"}, "tt"));
  g.nodes.push_back(node("Gather", {"type_embeddings", "tt"}, "types"));
  model::Node by_axis = node("Gather", {"small_table", "tt"}, "more");
  by_axis.attributes["axis"].i = 1;  // extent 50: larger, not the bound
  g.nodes.push_back(by_axis);

  const auto in = generated_inputs(g, 1);
  REQUIRE(in.size() == 6);
  const Tensor& ids = in.at("input_ids");
  CHECK(ids.type == model::ElemType::i64);
  CHECK(ids.shape == Ints{1, 16});
  std::set<std::int64_t> distinct;
  for (auto v : ids.i64) {
    CHECK(v >= 0);
    CHECK(v < 1000);
    distinct.insert(v);
  }
  CHECK(distinct.size() > 8);  // spread over the vocabulary
  CHECK(in.at("attention_mask").i64 == Ints(16, 1));
  for (auto v : in.at("token_type_ids").i64) CHECK((v == 0 || v == 1));
  for (auto v : in.at("steps").i64) CHECK((v >= 0 && v < 4));
  CHECK(in.at("flags").i64 == Ints{1, 1});
  CHECK(in.at("x").type == model::ElemType::f32);
  // Seeded: the same values again, others for another seed; floats from their own stream.
  CHECK(generated_inputs(g, 1).at("input_ids").i64 == ids.i64);
  CHECK(generated_inputs(g, 2).at("input_ids").i64 != ids.i64);
  model::Graph floats_only;
  floats_only.inputs = {value("a", {5}), value("b", {3})};
  const auto b = generated_inputs(floats_only, 7).at("b").f32;  // the second input: seed 8's stream
  const auto a = generated_inputs(floats_only, 8).at("a").f32;
  CHECK(std::equal(b.begin(), b.end(), a.begin()));

  CHECK(generated_input_text(g, "input_ids") == "indices in [0, 1000) (of Gather Gather_words)");
  CHECK(generated_input_text(g, "token_type_ids") == "indices in [0, 2) (of Gather Gather_types)");
  CHECK(generated_input_text(g, "attention_mask") == "ones (a mask)");
  CHECK(generated_input_text(g, "steps") == "values in [0, 4)");
  CHECK(generated_input_text(g, "flags") == "true (ones)");
}

TEST_CASE("deploy: read_npz reads the zoo's .npz files, inputs and ONNX Runtime's outputs", "[deploy][model_check]") {
  const auto bert = read_npz(zoo("bert_tiny.legacy.npz"));
  REQUIRE(bert.count("input:input_ids"));
  REQUIRE(bert.count("output:last_hidden_state"));
  const NpzArray& ids = bert.at("input:input_ids");
  CHECK(ids.dtype == "<i8");
  CHECK(ids.shape == Ints{1, 16});
  CHECK_FALSE(ids.floating);
  CHECK(ids.values.front() == 101);  // [CLS]
  CHECK(ids.values.back() == 102);   // [SEP]
  CHECK(bert.at("output:last_hidden_state").dtype == "<f4");
  CHECK(bert.at("output:last_hidden_state").shape == Ints{1, 16, 32});

  // The model's inputs from it: by "input:NAME", outputs ignored.
  model::Graph g;
  g.inputs = {value("input_ids", {1, 16}, model::ElemType::i64), value("attention_mask", {1, 16}, model::ElemType::i64)};
  const auto in = inputs_from_npz(g, bert, "b.npz");
  CHECK(in.at("input_ids").i64.front() == 101);
  CHECK(in.at("attention_mask").i64 == Ints(16, 1));

  // Wrong shape, wrong type, a missing input, an array naming no input.
  model::Graph other = g;
  other.inputs[0] = value("input_ids", {1, 8}, model::ElemType::i64);
  CHECK_THROWS_WITH(inputs_from_npz(other, bert, "b.npz"),
                    Catch::Contains("b.npz") && Catch::Contains("[1,16]") && Catch::Contains("[1,8]"));
  other.inputs[0] = value("input_ids", {1, 16});
  CHECK_THROWS_WITH(inputs_from_npz(other, bert, "b.npz"), Catch::Contains("<i8") && Catch::Contains("is float"));
  other.inputs[0] = value("pixels", {1, 16});
  CHECK_THROWS_WITH(inputs_from_npz(other, bert, "b.npz"), Catch::Contains("no array for the model input pixels"));
  auto extra = bert;
  extra["stray"] = ids;
  CHECK_THROWS_WITH(inputs_from_npz(g, extra, "b.npz"), Catch::Contains("stray names no model input"));

  // A float input from a float array (mobilenet's image).
  const auto mobile = read_npz(zoo("mobilenet_v3_small_w025.legacy.npz"));
  model::Graph image;
  image.inputs = {value("input", {1, 3, 64, 64})};
  const auto pixels = inputs_from_npz(image, mobile, "m.npz");
  CHECK(pixels.at("input").f32.size() == 3 * 64 * 64);
  CHECK(pixels.at("input").f32[0] == static_cast<float>(mobile.at("input:input").values[0]));
}

TEST_CASE("deploy: a symbolic dimension takes its size from the .npz's arrays", "[deploy][model_check]") {
  model::Graph g;
  model::ValueInfo ids;
  ids.name = "input_ids";
  ids.type = model::ElemType::i64;
  ids.shape = model::Shape{model::Dim{-1, "batch"}, model::Dim{-1, "sequence"}};
  g.inputs = {ids, ids};
  g.inputs[1].name = "attention_mask";
  const auto arrays = read_npz(zoo("bert_tiny_dyn.legacy.npz"));
  CHECK(npz_binding(g, arrays, "d.npz") == "batch=1;sequence=16");
  auto disagree = arrays;
  disagree["input:attention_mask"].shape = {1, 9};
  CHECK_THROWS_WITH(npz_binding(g, disagree, "d.npz"), Catch::Contains("sequence two values, 16 and 9"));
}

TEST_CASE("deploy: a corrupt .npz is refused with a clear error", "[deploy][model_check]") {
  CHECK_THAT(npz_error("/nonexistent/x.npz"), Catch::Contains("/nonexistent/x.npz") && Catch::Contains("no such file"));
  const std::string good = read_bytes(zoo("embedding_tiny.legacy.npz"));
  REQUIRE(good.size() > 200);
  const Entries entries = entries_of(zoo("embedding_tiny.legacy.npz"));
  REQUIRE(entries.size() >= 2);

  TempFile not_zip("this is not a zip archive", "text.npz");
  CHECK_THAT(npz_error(not_zip.path), Catch::Contains("not a .npz file"));

  TempFile truncated(good.substr(0, good.size() / 2), "half.npz");
  CHECK_THAT(npz_error(truncated.path), Catch::Contains("not a .npz file"));

  // A stored entry's data damaged: its CRC no longer matches.
  std::string flipped = good;
  const std::size_t data = flipped.find("\x93NUMPY");
  REQUIRE(data != std::string::npos);
  REQUIRE(data + 150 < flipped.size());
  flipped[data + 150] ^= 0x5a;  // in the first entry's array data
  TempFile crc(flipped, "crc.npz");
  CHECK_THAT(npz_error(crc.path), Catch::Contains("crc.npz") && Catch::Contains("CRC"));

  // np.savez_compressed's archives (deflated entries) read as np.savez's do.
  TempFile deflated(zip_of(entries, true), "deflate.npz");
  const auto from_deflated = read_npz(deflated.path);
  const auto from_stored = read_npz(zoo("embedding_tiny.legacy.npz"));
  REQUIRE(from_deflated.size() == from_stored.size());
  for (const auto& [name, array] : from_stored) {
    CHECK(from_deflated.at(name).values == array.values);
    CHECK(from_deflated.at(name).shape == array.shape);
  }

  // The .npy inside an entry damaged (archives rewritten, their CRCs right).
  auto changed = [&](const std::string& from, const std::string& to, const std::string& name) {
    Entries edited = entries;
    bool found = false;
    for (auto& [entry, bytes] : edited) {
      const std::size_t at = bytes.find(from);
      if (at == std::string::npos) continue;
      bytes.replace(at, from.size(), to);
      found = true;
      break;
    }
    REQUIRE(found);
    return TempFile(zip_of(edited, false), name);
  };
  const TempFile no_magic = changed("\x93NUMPY", "\x93XUMPY", "magic.npz");
  CHECK_THAT(npz_error(no_magic.path), Catch::Contains("not a .npy array"));

  // An unsupported dtype (complex) and a big-endian one.
  const TempFile c8 = changed("'<i8'", "'<c8'", "complex.npz");
  CHECK_THAT(npz_error(c8.path), Catch::Contains("dtype <c8 is not supported"));
  const TempFile be = changed("'<i8'", "'>i8'", "big.npz");
  CHECK_THAT(npz_error(be.path), Catch::Contains("dtype >i8 is not supported"));

  // A shape that does not match the data.
  const TempFile wrong_size = changed("(1, 16)", "(1, 17)", "size.npz");
  CHECK_THAT(npz_error(wrong_size.path), Catch::Contains("shape [1,17]") && Catch::Contains("bytes of data"));

  // Fortran order.
  const TempFile f = changed("False", "True ", "fortran.npz");
  CHECK_THAT(npz_error(f.path), Catch::Contains("Fortran"));
}

TEST_CASE("deploy: integer outputs compare with ONNX Runtime's, and constant outputs are found", "[deploy][model_check]") {
  Tensor got = Tensor::ints({3}, {1, 0, 5});
  Tensor want = Tensor::floats({3}, std::vector<float>{1, 0, 5});
  CHECK(compare_output("ids", got, &want, 1e-3).ok);
  want.f32[2] = 4;
  const OutputCheck off = compare_output("ids", got, &want, 1e-3);
  CHECK_FALSE(off.ok);
  CHECK(off.max_abs == 1);

  model::Graph g;
  g.outputs = {value("zeros", {4}), value("varied", {3}), value("scalar", {}), value("ones", {2}, model::ElemType::i64)};
  std::map<std::string, Tensor> outputs;
  outputs["zeros"] = Tensor::floats({4}, 0.0f);
  outputs["varied"] = Tensor::floats({3}, std::vector<float>{0, 0, 1e-9f});
  outputs["scalar"] = Tensor::floats({}, std::vector<float>{3});
  outputs["ones"] = Tensor::ints({2}, {1, 1});
  CHECK(constant_outputs(g, outputs) == std::vector<std::string>{"zeros", "ones"});
}

TEST_CASE("deploy: the outputs a .npz holds are compared with Kestrel's", "[deploy][model_check]") {
  const auto arrays = read_npz(zoo("embedding_tiny.legacy.npz"));
  REQUIRE(arrays.count("output:hidden"));
  model::Graph g;
  g.outputs = {value("hidden", {1, 16, 16}), value("other", {2})};
  std::map<std::string, Tensor> outputs;
  Tensor same = Tensor::floats({1, 16, 16});
  for (std::size_t i = 0; i < same.f32.size(); ++i) same.f32[i] = static_cast<float>(arrays.at("output:hidden").values[i]);
  outputs["hidden"] = same;
  outputs["other"] = Tensor::floats({2}, 1.0f);
  auto checks = compare_npz_outputs(g, outputs, arrays, 1e-3);
  REQUIRE(checks.size() == 1);  // "other" is not in the file
  CHECK(checks[0].name == "hidden");
  CHECK(checks[0].ok);
  outputs["hidden"].f32[5] += 1.0f;
  checks = compare_npz_outputs(g, outputs, arrays, 1e-3);
  CHECK_FALSE(checks[0].ok);
  CHECK(checks[0].max_abs == Approx(1.0).epsilon(1e-3));
}
