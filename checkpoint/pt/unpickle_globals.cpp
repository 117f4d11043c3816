// The allowlisted Python globals of the unpickler and what they build (Note [Unpickler
// allowlist]): tensors from persistent storage ids, OrderedDict, torch.Size, and in tolerant mode
// object placeholders. Part of the Parser (pickle_graph.h); split from unpickler.cpp for size.
#include <cctype>
#include <optional>

#include "checkpoint/ds_objects.h"
#include "checkpoint/pt/pickle_graph.h"
#include "checkpoint/tensor_types.h"
#include "core/error.h"

namespace zrt::ckpt::detail {
namespace {

// Note [Unpickler allowlist]
// Strict mode knows exactly these globals, and rebuilds them natively without calling anything:
//   torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, meta])
//                                         -> a view of the storage (requires_grad dropped)
//   torch._utils._rebuild_parameter(tensor, requires_grad, hooks[, state]) and
//   torch._utils._rebuild_parameter_with_state   -> the tensor
//   torch._tensor._rebuild_from_type_v2(func, torch.Tensor, args, state): how torch.save writes
//                                         a plain tensor that carries Python attributes (DeepSpeed's
//                                         ZeRO-3 flat groups) -> func(*args), the attributes
//                                         dropped; any other type (a tensor subclass) is refused
//   torch.Tensor                          only as that second argument
//   collections.OrderedDict()             -> an ordered dict (BUILD state, e.g. _metadata, dropped)
//   torch.Size((d0, ...))                 -> torch.Size
//   torch.<T>Storage for the dtypes of tensor_types.h, only inside a persistent id
//   deepspeed.runtime.fp16.loss_scaler.LossScaler / DynamicLossScaler and
//   deepspeed.utils.tensor_fragment.fragment_address, only as NEWOBJ with no
//                                         arguments and a dict BUILD state (how DeepSpeed, and
//                                         ZeroRT, pickle them) -> an object Value of
//                                         its attributes; nothing of DeepSpeed is run
//   torch.float16, torch.bfloat16, ... (the dtypes of tensor_types.h), as values (a
//                                         DynamicLossScaler's dtype) -> an object Value naming it
// torch.device is deliberately not allowed: state dicts do not need it and Python's weights_only
// 1.13 refuses it too; in tolerant mode it becomes an object placeholder like any unknown global.
bool is_plain_data_class(const std::string& name) {
  return name == kDsLossScalerClass || name == kDsDynamicLossScalerClass ||
         name == kDsFragmentAddressClass;
}

bool is_allowed_global(const std::string& name) {
  if (is_plain_data_class(name) || is_torch_dtype_global(name)) return true;
  static const char* kAllowed[] = {
      "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
      "torch._utils._rebuild_parameter_with_state", "torch._tensor._rebuild_from_type_v2",
      "torch.Tensor", "collections.OrderedDict", "torch.Size"};
  for (const char* a : kAllowed) {
    if (name == a) return true;
  }
  return name.rfind("torch.", 0) == 0 && dtype_of_storage_class(name.substr(6)).has_value();
}

}  // namespace

bool is_torch_dtype_global(const std::string& name) {
  return name.rfind("torch.", 0) == 0 && dtype_of_python_name(name.substr(6)).has_value();
}

Node* Parser::make_global(std::string module, const std::string& name) {
  if (module == "__builtin__") module = "builtins";
  if (module == "copy_reg") module = "copyreg";
  const std::string full = module + "." + name;
  for (char c : full) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) {
      fail("GLOBAL name has characters outside [A-Za-z0-9_.]");
    }
  }
  if (g_.options.mode == ReadMode::kStrict && !is_allowed_global(full)) {
    fail(str("unsupported Python global '", full,
             "': only tensors, OrderedDict and torch.Size are allowed (a file with other Python "
             "objects can be read in tolerant mode, which keeps them as placeholders)"));
  }
  Node* node = g_.make(NodeKind::kGlobal, *this);
  node->s = full;
  return node;
}

Node* Parser::new_object(Node* cls, Node* args) {
  if (cls->kind != NodeKind::kGlobal) fail(str("cannot instantiate a ", node_kind_name(cls->kind)));
  if (g_.options.mode == ReadMode::kStrict) {
    if (!is_plain_data_class(cls->s)) fail(str("cannot instantiate a ", cls->s));
    if (args->kind != NodeKind::kTuple || !args->items.empty()) {
      fail(str(cls->s, " made with arguments"));
    }
  }
  return make_object(cls->s, args);
}

Node* Parser::make_object(const std::string& type, Node* args) {
  // Strict mode reaches here only for a plain data class (new_object); it refused other globals.
  Node* node = g_.make(NodeKind::kObject, *this);
  node->s = type;
  node->a = args;
  return node;
}

void Parser::build(Node* target, Node* state) {
  if (target->kind == NodeKind::kObject) {
    if (g_.options.mode == ReadMode::kStrict && (state->kind != NodeKind::kDict || state->flag)) {
      fail(str("the state of a ", target->s, " is a ", node_kind_name(state->kind),
               ", not a dict of its attributes"));
    }
    target->b = state;
  } else if (target->kind == NodeKind::kDict && target->flag) {
    // OrderedDict attributes such as a state dict's _metadata: dropped.
  } else if (target->kind == NodeKind::kTensor && g_.options.mode == ReadMode::kTolerant) {
    // Tensor subclass state: dropped.
  } else {
    fail(str("BUILD on a ", node_kind_name(target->kind), " is not supported"));
  }
}

Node* Parser::reduce(Node* fn, Node* args) {
  if (fn->kind == NodeKind::kObject) return make_object(fn->s, args);
  if (fn->kind != NodeKind::kGlobal) fail(str("REDUCE of a ", node_kind_name(fn->kind)));
  const std::string& name = fn->s;
  auto tuple_args = [&](size_t lo, size_t hi) -> const std::vector<Node*>& {
    if (args->kind != NodeKind::kTuple || args->items.size() < lo || args->items.size() > hi) {
      fail(str(name, " called with unexpected arguments (", node_kind_name(args->kind), " of ",
               args->items.size(), ")"));
    }
    return args->items;
  };
  if (name == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(tuple_args(6, 7));
  if (name == "torch._utils._rebuild_parameter" ||
      name == "torch._utils._rebuild_parameter_with_state") {
    const auto& a = tuple_args(3, 4);
    if (a[0]->kind != NodeKind::kTensor) fail(str(name, " of a ", node_kind_name(a[0]->kind)));
    return a[0];
  }
  if (name == "torch._tensor._rebuild_from_type_v2") {
    const auto& a = tuple_args(4, 4);
    const bool plain = a[1]->kind == NodeKind::kGlobal && a[1]->s == "torch.Tensor";
    if (!plain) {
      if (g_.options.mode == ReadMode::kTolerant) return make_object(name, args);
      fail(str(name, " of a tensor subclass (",
               a[1]->kind == NodeKind::kGlobal ? a[1]->s : node_kind_name(a[1]->kind),
               "): only plain tensors are read"));
    }
    if (a[2]->kind != NodeKind::kTuple) fail(str(name, ": its arguments are not a tuple"));
    Node* tensor = reduce(a[0], a[2]);
    if (tensor->kind != NodeKind::kTensor) fail(str(name, " did not rebuild a tensor"));
    return tensor;  // a[3], the tensor's Python attributes: dropped
  }
  if (name == "collections.OrderedDict") {
    tuple_args(0, 0);
    Node* n = g_.make(NodeKind::kDict, *this);
    n->flag = true;
    return n;
  }
  if (name == "torch.Size") {
    const auto& a = tuple_args(1, 1);
    Node* n = g_.make(NodeKind::kSize, *this);
    n->dims = int_list(a[0], "torch.Size", 0, 64);
    return n;
  }
  if (g_.options.mode == ReadMode::kStrict) fail(str("cannot call ", name));
  return make_object(name, args);
}

std::vector<int64_t> Parser::int_list(Node* n, const char* what, int64_t min_value,
                                      size_t max_len) {
  if (n->kind != NodeKind::kTuple && n->kind != NodeKind::kList) {
    fail(str(what, " must be a tuple of ints, got a ", node_kind_name(n->kind)));
  }
  if (n->items.size() > max_len) fail(str(what, " has ", n->items.size(), " dimensions"));
  std::vector<int64_t> out;
  for (Node* item : n->items) {
    if (item->kind != NodeKind::kInt || item->i < min_value) {
      fail(str(what, " has an element that is not an int >= ", min_value));
    }
    out.push_back(item->i);
  }
  return out;
}

Node* Parser::persistent(Node* pid) {
  if (pid->kind != NodeKind::kTuple || pid->items.size() != 5) {
    fail("persistent id is not a ('storage', type, key, location, numel) tuple");
  }
  const auto& p = pid->items;
  if (p[0]->kind != NodeKind::kString || p[0]->s != "storage") {
    fail("persistent id does not name a storage");
  }
  std::optional<at::ScalarType> dtype;
  if (p[1]->kind == NodeKind::kGlobal && p[1]->s.rfind("torch.", 0) == 0) {
    dtype = dtype_of_storage_class(p[1]->s.substr(6));
  }
  if (!dtype) {
    fail(str("storage type ",
             p[1]->kind == NodeKind::kGlobal ? p[1]->s : node_kind_name(p[1]->kind),
             " is not supported"));
  }
  if (p[2]->kind != NodeKind::kString || p[2]->s.empty() || p[2]->s.size() > 64) {
    fail("storage key must be a short string");
  }
  for (char c : p[2]->s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      fail("storage key has characters outside [A-Za-z0-9_]");
    }
  }
  if (p[3]->kind != NodeKind::kString || p[3]->s.size() > 64) {
    fail("storage location must be a short string");
  }
  if (p[4]->kind != NodeKind::kInt || p[4]->i < 0 ||
      p[4]->i > (int64_t{1} << 62) / dtype_itemsize(*dtype)) {
    fail("storage size must be a non-negative int of at most 2^62 bytes");
  }
  return g_.declare_storage(*this, p[2]->s, *dtype, p[4]->i);
}

Node* Parser::rebuild_tensor(const std::vector<Node*>& a) {
  if (a[0]->kind != NodeKind::kStorage) {
    fail(str("_rebuild_tensor_v2 of a ", node_kind_name(a[0]->kind), " instead of a storage"));
  }
  if (a[1]->kind != NodeKind::kInt || a[1]->i < 0)
    fail("tensor storage offset must be an int >= 0");
  TensorInfo t;
  t.storage = a[0];
  t.offset = a[1]->i;
  t.sizes = int_list(a[2], "tensor size", 0, 64);
  t.strides = int_list(a[3], "tensor stride", 0, 64);
  if (t.sizes.size() != t.strides.size()) fail("tensor size and stride differ in length");
  if (a[4]->kind != NodeKind::kBool) fail("tensor requires_grad must be a bool");
  if (a[5]->kind != NodeKind::kDict && a[5]->kind != NodeKind::kNone) {
    fail("tensor backward hooks must be a dict");
  }
  const StorageInfo& s = g_.storages[static_cast<size_t>(t.storage->i)];
  // Elements the view reaches: offset + sum((size_i - 1) * stride_i) + 1, overflow-checked.
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t numel = 1, extent = 0;
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    if (t.sizes[i] == 0) {
      numel = 0;
      break;
    }
    if (numel > kLimit / t.sizes[i]) fail("tensor has too many elements");
    numel *= t.sizes[i];
    const int64_t span = t.sizes[i] - 1;
    if (t.strides[i] != 0 && span > (kLimit - extent) / t.strides[i]) {
      fail("tensor extent overflows");
    }
    extent += span * t.strides[i];
  }
  const int64_t needed = numel == 0 ? t.offset : t.offset + extent + 1;
  if (t.offset > kLimit || needed > s.numel) {
    fail(::zrt::str("tensor of size ", c10::IntArrayRef(t.sizes), " stride ",
                    c10::IntArrayRef(t.strides), " offset ", t.offset, " reaches element ", needed,
                    " of storage '", s.key, "' which has only ", s.numel));
  }
  Node* n = g_.make(NodeKind::kTensor, *this);
  n->i = static_cast<int64_t>(g_.tensors.size());
  g_.tensors.push_back(std::move(t));
  return n;
}

}  // namespace zrt::ckpt::detail
