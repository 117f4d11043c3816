#include "checkpoint/pt/pickle_graph.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "core/error.h"

namespace zrt::ckpt::detail {

const char* node_kind_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::kNone:
      return "None";
    case NodeKind::kBool:
      return "bool";
    case NodeKind::kInt:
      return "int";
    case NodeKind::kDouble:
      return "float";
    case NodeKind::kString:
      return "str";
    case NodeKind::kBytes:
      return "bytes";
    case NodeKind::kList:
      return "list";
    case NodeKind::kTuple:
      return "tuple";
    case NodeKind::kDict:
      return "dict";
    case NodeKind::kSet:
      return "set";
    case NodeKind::kSize:
      return "torch.Size";
    case NodeKind::kTensor:
      return "tensor";
    case NodeKind::kStorage:
      return "storage";
    case NodeKind::kGlobal:
      return "global";
    case NodeKind::kObject:
      return "object";
  }
  return "?";
}

void Graph::fail(const std::string& message) const {
  throw CheckpointError(str(context, ": data.pkl: ", message));
}

Node* Graph::make(NodeKind kind, const Parser& parser) {
  if (arena_.size() >= options.max_nodes) {
    parser.fail(str("pickle creates more than the limit of ", options.max_nodes, " objects"));
  }
  arena_.push_back(std::make_unique<Node>(kind));
  return arena_.back().get();
}

Node* Graph::declare_storage(const Parser& parser, const std::string& key, at::ScalarType dtype,
                             int64_t numel) {
  auto it = storage_nodes_.find(key);
  if (it != storage_nodes_.end()) {
    const StorageInfo& s = storages[static_cast<size_t>(it->second->i)];
    if (s.dtype != dtype || s.numel != numel) {
      parser.fail(str("storage '", key, "' is declared as ", c10::toString(s.dtype), "[", s.numel,
                      "] and as ", c10::toString(dtype), "[", numel, "]"));
    }
    return it->second;
  }
  Node* n = make(NodeKind::kStorage, parser);
  n->i = static_cast<int64_t>(storages.size());
  n->s = key;
  StorageInfo s;
  s.key = key;
  s.dtype = dtype;
  s.numel = numel;
  storages.push_back(std::move(s));
  storage_nodes_.emplace(key, n);
  return n;
}

void Graph::mark_reachable(Node* from) {
  std::vector<Node*> todo{from};
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    if (n == nullptr || n->reached) continue;
    n->reached = true;
    todo.insert(todo.end(), n->items.begin(), n->items.end());
    for (Node* child : {n->a, n->b, n->c, n->e}) todo.push_back(child);
  }
}

Value Graph::finish(const StorageLoader& loader) {
  ZRT_INTERNAL_ASSERT(root != nullptr, "unpickler finished without a root");
  std::vector<std::pair<Node*, Node*>> kept;  // (key, value) when only_keys is used
  if (!options.only_keys.empty()) {
    if (root->kind != NodeKind::kDict) {
      fail(str("cannot select keys: the pickled object is a ", node_kind_name(root->kind)));
    }
    for (size_t i = 0; i + 1 < root->items.size(); i += 2) {
      Node* k = root->items[i];
      if (k->kind == NodeKind::kString &&
          std::find(options.only_keys.begin(), options.only_keys.end(), k->s) !=
              options.only_keys.end()) {
        kept.emplace_back(k, root->items[i + 1]);
        mark_reachable(root->items[i + 1]);
      }
    }
  } else {
    mark_reachable(root);
  }

  // Tensor bytes: each needed storage is read once, then every tensor is a view of it.
  std::vector<Node*> tensor_nodes;
  for (const auto& node : arena_) {
    if (node->kind == NodeKind::kTensor && node->reached) {
      TensorInfo& t = tensors[static_cast<size_t>(node->i)];
      storages[static_cast<size_t>(t.storage->i)].needed = true;
      tensor_nodes.push_back(node.get());
    }
  }
  for (StorageInfo& s : storages) {
    if (!s.needed) continue;
    s.data = loader(s.key, s.dtype, s.numel);
    ZRT_INTERNAL_ASSERT(s.data.defined() && s.data.scalar_type() == s.dtype &&
                            s.data.numel() == s.numel && s.data.is_contiguous(),
                        "storage loader returned a wrong tensor for '", s.key, "'");
  }
  for (Node* n : tensor_nodes) {
    TensorInfo& t = tensors[static_cast<size_t>(n->i)];
    const at::Tensor& base = storages[static_cast<size_t>(t.storage->i)].data;
    t.value = base.as_strided(t.sizes, t.strides, t.offset);
  }

  if (options.only_keys.empty()) return expand(root, 0);
  Value out(Dict(), root->flag);
  for (auto& [k, v] : kept) out.set(k->s, expand(v, 1));
  return out;
}

Value Graph::expand_dict(Node* n, int depth) {
  bool plain_keys = true;
  for (size_t i = 0; i < n->items.size(); i += 2) {
    const NodeKind k = n->items[i]->kind;
    if (k != NodeKind::kString && k != NodeKind::kInt) {
      if (options.mode == ReadMode::kStrict) {
        fail(str("dict key of type ", node_kind_name(k), " is not supported (str and int are)"));
      }
      plain_keys = false;
    }
  }
  if (!plain_keys) {
    // Tolerant mode: keep the pairs, as a placeholder of a dict we cannot key.
    Value pairs = Value::list();
    for (size_t i = 0; i < n->items.size(); i += 2) {
      pairs.push_back(
          Value::tuple({expand(n->items[i], depth + 1), expand(n->items[i + 1], depth + 1)}));
    }
    return Value::object("builtins.dict", std::move(pairs));
  }
  Value out(Dict(), n->flag);
  for (size_t i = 0; i < n->items.size(); i += 2) {
    Node* k = n->items[i];
    Value v = expand(n->items[i + 1], depth + 1);
    if (k->kind == NodeKind::kString) {
      out.set(k->s, std::move(v));
    } else {
      out.set(k->i, std::move(v));
    }
  }
  return out;
}

Value Graph::expand(Node* n, int depth) {
  if (depth > options.max_depth) fail(str("values nest deeper than ", options.max_depth));
  if (++values_ > options.max_values) {
    fail(
        str("the pickle expands to more than ", options.max_values, " values (shared references)"));
  }
  switch (n->kind) {
    case NodeKind::kNone:
      return Value();
    case NodeKind::kBool:
      return Value(n->flag);
    case NodeKind::kInt:
      return Value(n->i);
    case NodeKind::kDouble:
      return Value(n->d);
    case NodeKind::kString:
      return Value(n->s);
    case NodeKind::kBytes:
      return Value::object("builtins.bytes");
    case NodeKind::kSize:
      return Value::torch_size(n->dims);
    case NodeKind::kTensor:
      return Value(tensors[static_cast<size_t>(n->i)].value);
    case NodeKind::kStorage:
      if (options.mode == ReadMode::kStrict) fail("a bare storage object is not supported");
      return Value::object("torch.storage");
    case NodeKind::kGlobal:
      // Strict mode allows torch dtypes as values (a DynamicLossScaler's dtype).
      if (options.mode == ReadMode::kStrict && !is_torch_dtype_global(n->s)) {
        fail(str("a bare reference to ", n->s));
      }
      return Value::object(n->s);
    default:
      break;
  }
  if (n->visiting) fail(str("a ", node_kind_name(n->kind), " contains itself"));
  n->visiting = true;
  Value out;
  switch (n->kind) {
    case NodeKind::kList:
    case NodeKind::kTuple:
    case NodeKind::kSet: {
      std::vector<Value> items;
      items.reserve(n->items.size());
      for (Node* item : n->items) items.push_back(expand(item, depth + 1));
      if (n->kind == NodeKind::kSet) {
        out =
            Value::object("builtins.set", Value(), Value(), Value::list(std::move(items)), Value());
      } else {
        out = n->kind == NodeKind::kList ? Value::list(std::move(items))
                                         : Value::tuple(std::move(items));
      }
      break;
    }
    case NodeKind::kDict:
      out = expand_dict(n, depth);
      break;
    case NodeKind::kObject: {
      auto sub = [&](Node* m) { return m ? expand(m, depth + 1) : Value(); };
      out = Value::object(n->s, sub(n->a), sub(n->b), sub(n->c), sub(n->e));
      break;
    }
    default:
      ZRT_INTERNAL_ASSERT(false, "unexpected node kind ", node_kind_name(n->kind));
  }
  n->visiting = false;
  return out;
}

}  // namespace zrt::ckpt::detail
