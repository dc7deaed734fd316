// Folding of integer shape computations (see fold_shapes.h).
#include "fold_shapes.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kestrel::model {

namespace {

// No tensor of more elements is read, computed or written: shape computations are small,
// and a large constant (a mask, a table of position ids) stays as the exporter wrote it.
constexpr std::int64_t kMaxElements = 4096;

// An int64, int32 or bool tensor; the values widened to int64 (bool as 0 or 1).
struct IntTensor {
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> values;
  int type = onnx::TensorProto::INT64;
};

using Dims = std::vector<std::int64_t>;

// The element count of `dims`; none when a dimension is negative or the count passes the cap.
std::optional<std::int64_t> count_of(const Dims& dims) {
  std::int64_t n = 1;
  for (auto d : dims) {
    if (d < 0) return std::nullopt;
    if (d == 0) return 0;
  }
  for (auto d : dims) {
    if (n > kMaxElements / d) return std::nullopt;
    n *= d;
  }
  return n;
}

bool is_int_type(int type) { return type == onnx::TensorProto::INT64 || type == onnx::TensorProto::INT32; }

std::optional<IntTensor> int_tensor(const onnx::TensorProto& t) {
  IntTensor out;
  out.dims.assign(t.dims().begin(), t.dims().end());
  out.type = t.data_type();
  const auto count = count_of(out.dims);
  if (!count || t.data_location() == onnx::TensorProto::EXTERNAL) return std::nullopt;
  const auto n = static_cast<std::size_t>(*count);
  auto raw = [&](auto zero) -> bool {
    using T = decltype(zero);
    if (t.raw_data().size() != n * sizeof(T)) return false;
    std::vector<T> data(n);
    if (n) std::memcpy(data.data(), t.raw_data().data(), t.raw_data().size());
    for (T v : data) out.values.push_back(static_cast<std::int64_t>(v));
    return true;
  };
  if (t.data_type() == onnx::TensorProto::INT64) {
    if (t.has_raw_data()) {
      if (!raw(std::int64_t{})) return std::nullopt;
    } else {
      out.values.assign(t.int64_data().begin(), t.int64_data().end());
    }
  } else if (t.data_type() == onnx::TensorProto::INT32 || t.data_type() == onnx::TensorProto::BOOL) {
    if (t.has_raw_data()) {
      const bool ok = t.data_type() == onnx::TensorProto::INT32 ? raw(std::int32_t{}) : raw(std::uint8_t{});
      if (!ok) return std::nullopt;
    } else {
      out.values.assign(t.int32_data().begin(), t.int32_data().end());
    }
    if (t.data_type() == onnx::TensorProto::BOOL) {
      for (auto& v : out.values) v = v != 0;
    }
  } else {
    return std::nullopt;
  }
  if (out.values.size() != n) return std::nullopt;
  return out;
}

// Narrows `v` to `type` as a Cast to it does (int32 wraps, bool is v != 0).
std::int64_t narrow(std::int64_t v, int type) {
  if (type == onnx::TensorProto::INT32) return static_cast<std::int32_t>(static_cast<std::uint32_t>(v));
  if (type == onnx::TensorProto::BOOL) return v != 0;
  return v;
}

std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return a.i();
  }
  return fallback;
}

std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return std::vector<std::int64_t>(a.ints().begin(), a.ints().end());
  }
  return std::nullopt;
}

// Multidirectional (numpy) broadcasting of `shapes`: none when they do not broadcast or
// the result passes the cap.
std::optional<Dims> broadcast(const std::vector<const Dims*>& shapes) {
  std::size_t rank = 0;
  for (const auto* s : shapes) rank = std::max(rank, s->size());
  Dims out(rank, 1);
  for (const auto* s : shapes) {
    const std::size_t shift = rank - s->size();
    for (std::size_t i = 0; i < s->size(); ++i) {
      const std::int64_t d = (*s)[i];
      std::int64_t& o = out[shift + i];
      if (d == o || d == 1) continue;
      if (o != 1) return std::nullopt;
      o = d;
    }
  }
  if (!count_of(out)) return std::nullopt;
  return out;
}

// For every element of a tensor of shape `out`, the index of the element of `t` that
// broadcasting reads (`t` broadcasts to `out`).
std::vector<std::size_t> broadcast_index(const IntTensor& t, const Dims& out) {
  const std::size_t rank = out.size();
  const std::size_t shift = rank - t.dims.size();
  // Strides of `t` in output coordinates: 0 along a dimension it broadcasts.
  std::vector<std::int64_t> stride(rank, 0);
  std::int64_t s = 1;
  for (std::size_t i = t.dims.size(); i-- > 0;) {
    stride[shift + i] = t.dims[i] == 1 ? 0 : s;
    s *= t.dims[i];
  }
  const std::int64_t n = *count_of(out);
  std::vector<std::size_t> index(static_cast<std::size_t>(n));
  std::vector<std::int64_t> pos(rank, 0);
  for (std::int64_t flat = 0; flat < n; ++flat) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < rank; ++d) offset += pos[d] * stride[d];
    index[static_cast<std::size_t>(flat)] = static_cast<std::size_t>(offset);
    for (std::size_t d = rank; d-- > 0;) {
      if (++pos[d] < out[d]) break;
      pos[d] = 0;
    }
  }
  return index;
}

class Folder {
 public:
  explicit Folder(onnx::ModelProto& proto) : graph_(*proto.mutable_graph()) {
    for (const auto& init : graph_.initializer()) {
      if (auto t = int_tensor(init)) constants_[init.name()] = *t;
      initializers_.insert(init.name());
    }
    auto add_shape = [&](const onnx::ValueInfoProto& info) {
      if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) return;
      std::vector<std::int64_t> dims;
      for (const auto& d : info.type().tensor_type().shape().dim()) {
        if (!d.has_dim_value()) return;
        dims.push_back(d.dim_value());
      }
      shapes_[info.name()] = dims;
    };
    for (const auto& v : graph_.input()) add_shape(v);
    for (const auto& v : graph_.value_info()) add_shape(v);
    for (const auto& v : graph_.output()) add_shape(v);
    for (const auto& init : graph_.initializer()) {
      shapes_[init.name()] = std::vector<std::int64_t>(init.dims().begin(), init.dims().end());
    }
  }

  // One round: folds what is computable now. An int64 or int32 result becomes an
  // initializer. The importer keeps bool constants without their values, so a bool
  // result read only by folded nodes goes with them, and one that a node left in the
  // graph reads becomes a Cast to bool of an int64 initializer (which the portable Cast
  // runs). A bool ConstantOfShape too large to fold becomes an int64 ConstantOfShape and
  // such a Cast. Returns the nodes folded or rewritten.
  int round() {
    auto& nodes = *graph_.mutable_node();
    std::vector<std::optional<IntTensor>> results;
    results.reserve(static_cast<std::size_t>(nodes.size()));
    for (const auto& node : nodes) {
      results.push_back(node.output_size() == 1 ? evaluate(node) : std::nullopt);
      if (results.back()) constants_[node.output(0)] = *results.back();
    }
    std::set<std::string> outputs;
    for (const auto& v : graph_.output()) outputs.insert(v.name());
    // Values read by nodes that stay as they are (in topological order: walk backwards).
    // A folded node reads nothing any more.
    std::set<std::string> read;
    std::vector<bool> remove(results.size(), false);
    for (std::size_t i = results.size(); i-- > 0;) {
      const auto& node = nodes[static_cast<int>(i)];
      const auto& r = results[i];
      const bool stays = !r || (r->type == onnx::TensorProto::BOOL &&
                                (outputs.contains(node.output(0)) || read.contains(node.output(0))));
      remove[i] = r && !stays;
      if (stays && (!r || !is_bool_cast_of_initializer(node))) {
        for (const auto& in : node.input()) read.insert(in);
        read_by_subgraphs(node, read);
      }
    }
    int folded = 0;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& node = nodes[static_cast<int>(i)];
      const auto& r = results[i];
      if (!r) {
        if (bool_constant_of_shape(node)) {
          // ConstantOfShape(value = v as int64) -> Cast to bool.
          auto* cos = kept.Add();
          *cos = node;
          cos->set_output(0, fresh_name(node.output(0) + "_int64"));
          for (auto& a : *cos->mutable_attribute()) {
            if (a.name() == "value") {
              auto value = int_tensor(a.t());
              a.mutable_t()->Clear();
              a.mutable_t()->set_data_type(onnx::TensorProto::INT64);
              a.mutable_t()->add_dims(1);
              a.mutable_t()->add_int64_data(value->values.at(0));
            }
          }
          add_bool_cast(kept, node, cos->output(0));
          ++folded;
        } else {
          *kept.Add() = node;
        }
        continue;
      }
      if (!remove[i]) {
        if (is_bool_cast_of_initializer(node)) {
          *kept.Add() = node;  // materialised in an earlier round
        } else {
          add_bool_cast(kept, node, add_initializer(fresh_name(node.output(0) + "_int64"), *r, onnx::TensorProto::INT64));
          ++folded;
        }
        continue;
      }
      ++folded;
      if (r->type != onnx::TensorProto::BOOL) add_initializer(node.output(0), *r, r->type);
    }
    if (folded) nodes.Swap(&kept);
    return folded;
  }

 private:
  // Adds to `read` what the subgraphs of `node` (If, Loop, Scan bodies) read: they may
  // read values of the enclosing graph.
  static void read_by_subgraphs(const onnx::NodeProto& node, std::set<std::string>& read) {
    auto visit = [&](const onnx::GraphProto& g) {
      for (const auto& n : g.node()) {
        for (const auto& in : n.input()) read.insert(in);
        read_by_subgraphs(n, read);
      }
    };
    for (const auto& a : node.attribute()) {
      if (a.has_g()) visit(a.g());
      for (const auto& g : a.graphs()) visit(g);
    }
  }

  // `t` as an initializer `name` of element type `type` (int64 or int32). Returns the name.
  std::string add_initializer(const std::string& name, const IntTensor& t, int type) {
    auto* init = graph_.add_initializer();
    init->set_name(name);
    init->set_data_type(type);
    for (auto d : t.dims) init->add_dims(d);
    for (auto v : t.values) {
      if (type == onnx::TensorProto::INT64) {
        init->add_int64_data(v);
      } else {
        init->add_int32_data(static_cast<std::int32_t>(v));
      }
    }
    initializers_.insert(name);
    return name;
  }

  // A name no value of the graph has yet, from `base`.
  std::string fresh_name(const std::string& base) {
    std::set<std::string> used(initializers_.begin(), initializers_.end());
    for (const auto& n : graph_.node()) used.insert(n.output().begin(), n.output().end());
    for (const auto& v : graph_.input()) used.insert(v.name());
    std::string name = base;
    for (int k = 1; used.contains(name); ++k) name = base + "_" + std::to_string(k);
    initializers_.insert(name);  // reserved
    return name;
  }

  // Appends to `kept` a Cast to bool of `from` that writes `node`'s output, named as `node`.
  static void add_bool_cast(google::protobuf::RepeatedPtrField<onnx::NodeProto>& kept, const onnx::NodeProto& node,
                            const std::string& from) {
    auto* cast = kept.Add();
    cast->set_op_type("Cast");
    cast->set_name(node.name());
    cast->add_input(from);
    cast->add_output(node.output(0));
    auto* to = cast->add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(onnx::TensorProto::BOOL);
  }

  bool is_bool_cast_of_initializer(const onnx::NodeProto& node) const {
    return node.op_type() == "Cast" && attr_int(node, "to", 0) == onnx::TensorProto::BOOL && node.input_size() == 1 &&
           initializers_.contains(node.input(0));
  }

  static bool bool_constant_of_shape(const onnx::NodeProto& node) {
    if (node.op_type() != "ConstantOfShape" || (!node.domain().empty() && node.domain() != "ai.onnx")) return false;
    for (const auto& a : node.attribute()) {
      if (a.name() == "value") {
        auto value = int_tensor(a.t());
        return value && value->type == onnx::TensorProto::BOOL && value->values.size() == 1;
      }
    }
    return false;
  }

  const IntTensor* constant(const onnx::NodeProto& node, int index) const {
    if (index >= node.input_size() || node.input(index).empty()) return nullptr;
    auto it = constants_.find(node.input(index));
    return it == constants_.end() ? nullptr : &it->second;
  }

  // The known shape of input `index` of `node`: a constant's dims, else inferred.
  const Dims* shape(const onnx::NodeProto& node, int index) const {
    if (const IntTensor* t = constant(node, index)) return &t->dims;
    if (index >= node.input_size()) return nullptr;
    auto it = shapes_.find(node.input(index));
    return it == shapes_.end() ? nullptr : &it->second;
  }

  static std::int64_t norm_axis(std::int64_t axis, std::int64_t rank) { return axis < 0 ? axis + rank : axis; }

  // An element-wise operator over every input of `node` (constants of one integer type,
  // or bool where `bool_inputs`), broadcast; `f` maps the input values to the output's.
  template <class F>
  std::optional<IntTensor> elementwise(const onnx::NodeProto& node, int result_type, bool bool_inputs, F f) const {
    std::vector<const IntTensor*> in;
    std::vector<const Dims*> shapes;
    for (int i = 0; i < node.input_size(); ++i) {
      const IntTensor* t = constant(node, i);
      if (!t) return std::nullopt;
      const bool ok = bool_inputs ? t->type == onnx::TensorProto::BOOL : is_int_type(t->type);
      if (!ok || (!in.empty() && t->type != in.front()->type)) return std::nullopt;
      in.push_back(t);
      shapes.push_back(&t->dims);
    }
    if (in.empty()) return std::nullopt;
    auto dims = broadcast(shapes);
    if (!dims) return std::nullopt;
    std::vector<std::vector<std::size_t>> index;
    for (const auto* t : in) index.push_back(broadcast_index(*t, *dims));
    IntTensor out{*dims, {}, result_type == 0 ? in.front()->type : result_type};
    const std::size_t n = static_cast<std::size_t>(*count_of(*dims));
    std::vector<std::int64_t> args(in.size());
    for (std::size_t e = 0; e < n; ++e) {
      for (std::size_t k = 0; k < in.size(); ++k) args[k] = in[k]->values[index[k][e]];
      auto v = f(args);
      if (!v) return std::nullopt;
      out.values.push_back(narrow(*v, out.type));
    }
    return out;
  }

  std::optional<IntTensor> evaluate(const onnx::NodeProto& node) const {
    if (!node.domain().empty() && node.domain() != "ai.onnx") return std::nullopt;
    const std::string& op = node.op_type();
    using Args = std::vector<std::int64_t>;
    using R = std::optional<std::int64_t>;
    if (op == "Constant") {
      for (const auto& a : node.attribute()) {
        if (a.name() == "value") return int_tensor(a.t());
        if (a.name() == "value_int") return IntTensor{{}, {a.i()}};
        if (a.name() == "value_ints") {
          if (a.ints_size() > kMaxElements) return std::nullopt;
          return IntTensor{{a.ints_size()}, std::vector<std::int64_t>(a.ints().begin(), a.ints().end())};
        }
      }
      return std::nullopt;
    }
    if (op == "Shape") {
      const Dims* known = shape(node, 0);
      if (!known) return std::nullopt;
      const auto& dims = *known;
      const auto rank = static_cast<std::int64_t>(dims.size());
      std::int64_t start = std::clamp<std::int64_t>(norm_axis(attr_int(node, "start", 0), rank), 0, rank);
      std::int64_t end = std::clamp<std::int64_t>(norm_axis(attr_int(node, "end", rank), rank), 0, rank);
      IntTensor out;
      for (std::int64_t i = start; i < end; ++i) out.values.push_back(dims[static_cast<std::size_t>(i)]);
      out.dims = {static_cast<std::int64_t>(out.values.size())};
      return out;
    }
    if (op == "ConstantOfShape") {
      // Output of the shape given by input 0, every element the one-element `value`
      // (a float 0 when absent: not an integer, not folded).
      const IntTensor* s = constant(node, 0);
      if (!s || s->dims.size() != 1) return std::nullopt;
      std::optional<IntTensor> value;
      for (const auto& a : node.attribute()) {
        if (a.name() == "value") value = int_tensor(a.t());
      }
      if (!value || value->values.size() != 1) return std::nullopt;
      const auto n = count_of(s->values);
      if (!n) return std::nullopt;
      return IntTensor{s->values, std::vector<std::int64_t>(static_cast<std::size_t>(*n), value->values[0]),
                       value->type};
    }
    if (op == "Range") {
      // Scalars start, limit, delta: max(ceil((limit - start) / delta), 0) elements.
      const IntTensor* start = constant(node, 0);
      const IntTensor* limit = constant(node, 1);
      const IntTensor* delta = constant(node, 2);
      if (!start || !limit || !delta || start->values.size() != 1 || limit->values.size() != 1 ||
          delta->values.size() != 1 || !is_int_type(start->type) || start->type != limit->type ||
          start->type != delta->type) {
        return std::nullopt;
      }
      const std::int64_t s = start->values[0], l = limit->values[0], d = delta->values[0];
      if (d == 0) return std::nullopt;
      const std::int64_t span = l - s;
      std::int64_t n = span / d;
      if (n * d != span && ((span > 0) == (d > 0))) ++n;  // ceil of an inexact, positive quotient
      n = std::max<std::int64_t>(n, 0);
      if (n > kMaxElements) return std::nullopt;
      IntTensor out{{n}, {}, start->type};
      for (std::int64_t i = 0; i < n; ++i) out.values.push_back(s + i * d);
      return out;
    }
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
      if (node.input_size() != 2) return std::nullopt;
      return elementwise(node, 0, false, [&](const Args& v) -> R {
        const std::int64_t x = v[0], y = v[1];
        if (op == "Add") return x + y;
        if (op == "Sub") return x - y;
        if (op == "Mul") return x * y;
        if (y == 0) return std::nullopt;
        return x / y;  // integer division truncates, as ONNX Runtime's
      });
    }
    if (op == "Min" || op == "Max") {
      return elementwise(node, 0, false, [&](const Args& v) -> R {
        return op == "Min" ? *std::min_element(v.begin(), v.end()) : *std::max_element(v.begin(), v.end());
      });
    }
    if (op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" || op == "GreaterOrEqual") {
      if (node.input_size() != 2) return std::nullopt;
      const IntTensor* x = constant(node, 0);
      const bool bools = x && x->type == onnx::TensorProto::BOOL && op == "Equal";
      return elementwise(node, onnx::TensorProto::BOOL, bools, [&](const Args& v) -> R {
        if (op == "Equal") return v[0] == v[1];
        if (op == "Less") return v[0] < v[1];
        if (op == "Greater") return v[0] > v[1];
        if (op == "LessOrEqual") return v[0] <= v[1];
        return v[0] >= v[1];
      });
    }
    if (op == "Not") {
      if (node.input_size() != 1) return std::nullopt;
      return elementwise(node, onnx::TensorProto::BOOL, true, [](const Args& v) -> R { return !v[0]; });
    }
    if (op == "And" || op == "Or" || op == "Xor") {
      if (node.input_size() != 2) return std::nullopt;
      return elementwise(node, onnx::TensorProto::BOOL, true, [&](const Args& v) -> R {
        if (op == "And") return v[0] && v[1];
        if (op == "Or") return v[0] || v[1];
        return v[0] != v[1];
      });
    }
    if (op == "Where") {
      // Where(condition, X, Y): X where the condition holds, else Y, all three broadcast.
      const IntTensor* c = constant(node, 0);
      const IntTensor* x = constant(node, 1);
      const IntTensor* y = constant(node, 2);
      if (node.input_size() != 3 || !c || !x || !y || c->type != onnx::TensorProto::BOOL || x->type != y->type) {
        return std::nullopt;
      }
      auto dims = broadcast({&c->dims, &x->dims, &y->dims});
      if (!dims) return std::nullopt;
      const auto ci = broadcast_index(*c, *dims), xi = broadcast_index(*x, *dims), yi = broadcast_index(*y, *dims);
      IntTensor out{*dims, {}, x->type};
      for (std::size_t e = 0; e < ci.size(); ++e) {
        out.values.push_back(c->values[ci[e]] ? x->values[xi[e]] : y->values[yi[e]]);
      }
      return out;
    }
    if (op == "Expand") {
      // The input broadcast with the shape given by input 1 (either may broadcast).
      const IntTensor* x = constant(node, 0);
      const IntTensor* s = constant(node, 1);
      if (!x || !s || s->dims.size() != 1) return std::nullopt;
      for (auto d : s->values) {
        if (d < 0) return std::nullopt;
      }
      auto dims = broadcast({&x->dims, &s->values});
      if (!dims) return std::nullopt;
      IntTensor out{*dims, {}, x->type};
      for (auto i : broadcast_index(*x, *dims)) out.values.push_back(x->values[i]);
      return out;
    }
    const IntTensor* a = constant(node, 0);
    if (!a) return std::nullopt;
    if (op == "Identity") return *a;
    if (op == "Cast") {
      const auto to = static_cast<int>(attr_int(node, "to", 0));
      if (!is_int_type(to) && to != onnx::TensorProto::BOOL) return std::nullopt;
      IntTensor out{a->dims, {}, to};
      for (auto v : a->values) out.values.push_back(narrow(v, to));
      return out;
    }
    if (op == "Reshape") {
      // Shape input: 0 copies the input's dimension (unless allowzero), one -1 is inferred.
      const IntTensor* s = constant(node, 1);
      if (!s || s->dims.size() != 1) return std::nullopt;
      const bool allowzero = attr_int(node, "allowzero", 0) != 0;
      Dims dims = s->values;
      std::int64_t known = 1;
      int infer = -1;
      for (std::size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] == 0 && !allowzero) {
          if (i >= a->dims.size()) return std::nullopt;
          dims[i] = a->dims[i];
        }
        if (dims[i] == -1) {
          if (infer >= 0) return std::nullopt;
          infer = static_cast<int>(i);
        } else if (dims[i] < 0) {
          return std::nullopt;
        } else {
          known *= dims[i];
        }
      }
      const auto n = static_cast<std::int64_t>(a->values.size());
      if (infer >= 0) {
        if (known == 0 || n % known != 0) return std::nullopt;
        dims[static_cast<std::size_t>(infer)] = n / known;
      } else if (known != n) {
        return std::nullopt;
      }
      return IntTensor{dims, a->values, a->type};
    }
    if (op == "Gather") {
      const IntTensor* idx = constant(node, 1);
      if (!idx || a->dims.size() != 1 || norm_axis(attr_int(node, "axis", 0), 1) != 0) return std::nullopt;
      IntTensor out{idx->dims, {}, a->type};
      const auto n = static_cast<std::int64_t>(a->values.size());
      for (auto i : idx->values) {
        if (i < 0) i += n;
        if (i < 0 || i >= n) return std::nullopt;
        out.values.push_back(a->values[static_cast<std::size_t>(i)]);
      }
      return out;
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      std::vector<std::int64_t> axes;
      if (auto attr = attr_ints(node, "axes")) {
        axes = *attr;
      } else if (const IntTensor* ax = constant(node, 1)) {
        axes = ax->values;
      } else if (op == "Unsqueeze" || node.input_size() > 1) {
        return std::nullopt;
      }
      IntTensor out{{}, a->values, a->type};
      if (op == "Unsqueeze") {
        const auto rank = static_cast<std::int64_t>(a->dims.size() + axes.size());
        for (auto& ax : axes) ax = norm_axis(ax, rank);
        std::sort(axes.begin(), axes.end());
        std::size_t src = 0;
        for (std::int64_t i = 0; i < rank; ++i) {
          if (std::binary_search(axes.begin(), axes.end(), i)) {
            out.dims.push_back(1);
          } else if (src < a->dims.size()) {
            out.dims.push_back(a->dims[src++]);
          } else {
            return std::nullopt;
          }
        }
      } else {
        const auto rank = static_cast<std::int64_t>(a->dims.size());
        for (auto& ax : axes) ax = norm_axis(ax, rank);
        for (std::int64_t i = 0; i < rank; ++i) {
          const bool drop = axes.empty() ? a->dims[static_cast<std::size_t>(i)] == 1
                                         : std::find(axes.begin(), axes.end(), i) != axes.end();
          if (!drop) out.dims.push_back(a->dims[static_cast<std::size_t>(i)]);
        }
      }
      return out;
    }
    if (op == "Concat") {
      IntTensor out{{}, {}, a->type};
      for (int i = 0; i < node.input_size(); ++i) {
        const IntTensor* part = constant(node, i);
        if (!part || part->dims.size() != 1 || part->type != a->type) return std::nullopt;
        out.values.insert(out.values.end(), part->values.begin(), part->values.end());
      }
      if (static_cast<std::int64_t>(out.values.size()) > kMaxElements) return std::nullopt;
      out.dims = {static_cast<std::int64_t>(out.values.size())};
      return out;
    }
    if (op == "Slice") {
      const IntTensor* starts = constant(node, 1);
      const IntTensor* ends = constant(node, 2);
      if (!starts || !ends || a->dims.size() != 1 || starts->values.size() != 1 || ends->values.size() != 1) {
        return std::nullopt;
      }
      const IntTensor* axes = constant(node, 3);
      const IntTensor* steps = constant(node, 4);
      if ((node.input_size() > 3 && !node.input(3).empty() && !axes) ||
          (node.input_size() > 4 && !node.input(4).empty() && !steps)) {
        return std::nullopt;
      }
      if (axes && norm_axis(axes->values.at(0), 1) != 0) return std::nullopt;
      const std::int64_t step = steps ? steps->values.at(0) : 1;
      if (step != 1) return std::nullopt;
      const auto n = static_cast<std::int64_t>(a->values.size());
      std::int64_t s = starts->values[0], e = ends->values[0];
      if (s < 0) s += n;
      if (e < 0) e += n;
      s = std::clamp<std::int64_t>(s, 0, n);
      e = std::clamp<std::int64_t>(e, 0, n);
      IntTensor out{{}, {}, a->type};
      for (std::int64_t i = s; i < e; ++i) out.values.push_back(a->values[static_cast<std::size_t>(i)]);
      out.dims = {static_cast<std::int64_t>(out.values.size())};
      return out;
    }
    return std::nullopt;
  }

  onnx::GraphProto& graph_;
  std::map<std::string, IntTensor> constants_;
  std::map<std::string, std::vector<std::int64_t>> shapes_;
  std::set<std::string> initializers_;
};

// Drops what the last shape inference wrote: ONNX's inference keeps a dimension it named
// (unk__N) when a later run could tell its size, so each round infers afresh.
void forget_inferred(onnx::ModelProto& proto) {
  auto* graph = proto.mutable_graph();
  graph->clear_value_info();
  for (auto& output : *graph->mutable_output()) {
    if (!output.type().has_tensor_type() || !output.type().tensor_type().has_shape()) continue;
    for (auto& dim : *output.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (dim.has_dim_param()) dim.clear_dim_param();
    }
  }
}

}  // namespace

int fold_shape_computations(onnx::ModelProto& proto, const std::function<void(onnx::ModelProto&)>& infer) {
  int total = 0;
  for (int round = 0; round < 64; ++round) {
    if (round > 0) forget_inferred(proto);
    infer(proto);
    const int folded = Folder(proto).round();
    if (folded == 0) return total;
    total += folded;
  }
  forget_inferred(proto);
  infer(proto);
  return total;
}

}  // namespace kestrel::model
