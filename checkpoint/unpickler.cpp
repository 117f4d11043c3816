#include "checkpoint/unpickler.h"

#include <cstring>
#include <limits>
#include <unordered_map>

#include "checkpoint/pickle_graph.h"
#include "checkpoint/tensor_types.h"
#include "core/error.h"

namespace zrt::ckpt {
namespace detail {
namespace {

// Note [Unpickler allowlist]
// Strict mode knows exactly these globals, and rebuilds them natively without calling anything:
//   torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, meta])
//                                         -> a view of the storage (requires_grad dropped)
//   torch._utils._rebuild_parameter(tensor, requires_grad, hooks[, state]) and
//   torch._utils._rebuild_parameter_with_state   -> the tensor
//   collections.OrderedDict()             -> an ordered dict (BUILD state, e.g. _metadata, dropped)
//   torch.Size((d0, ...))                 -> torch.Size
//   torch.<T>Storage for the dtypes of tensor_types.h, only inside a persistent id
// torch.device is deliberately not allowed: state dicts do not need it and Python's weights_only
// 1.13 refuses it too; in tolerant mode it becomes an object placeholder like any unknown global.
bool is_allowed_global(const std::string& name) {
  static const char* kAllowed[] = {
      "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
      "torch._utils._rebuild_parameter_with_state", "collections.OrderedDict", "torch.Size"};
  for (const char* a : kAllowed) {
    if (name == a) return true;
  }
  return name.rfind("torch.", 0) == 0 && dtype_of_storage_class(name.substr(6)).has_value();
}

bool valid_utf8(const char* p, size_t n) {
  size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(p[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(p[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms and values past U+10FFFF. Surrogates pass: Python writes lone ones
    // ("surrogatepass") and a reader only compares them.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kPop = '0',
  kPopMark = '1',
  kDup = '2',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinString = 'T',
  kShortBinString = 'U',
  kBinUnicode = 'X',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kDict = 'd',
  kEmptyDict = '}',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kList = 'l',
  kEmptyList = ']',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kEmptyTuple = ')',
  kSetItems = 'u',
  kBinFloat = 'G',
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kProto = 0x80,
  kNewObj = 0x81,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kLong4 = 0x8b,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e,
  kEmptySet = 0x8f,
  kAddItems = 0x90,
  kFrozenSet = 0x91,
  kNewObjEx = 0x92,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
};

}  // namespace

// ---- reading primitives ----

void Parser::fail(const std::string& message) const {
  throw CheckpointError(str(g_.context, ": data.pkl offset ", op_offset_, ": ", message));
}

const char* Parser::need(uint64_t n) {
  if (n > data_.size() - pos_) {
    fail(str("needs ", n, " more bytes but only ", data_.size() - pos_,
             " remain (truncated or corrupt pickle)"));
  }
  const char* p = data_.data() + pos_;
  pos_ += n;
  return p;
}

uint64_t Parser::read_uint(int bytes) {
  const char* p = need(bytes);
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string Parser::read_line() {
  const size_t limit = std::min<size_t>(data_.size() - pos_, 512);
  const void* nl = std::memchr(data_.data() + pos_, '\n', limit);
  if (nl == nullptr) fail("GLOBAL name without a newline within 512 bytes");
  const size_t len = static_cast<const char*>(nl) - (data_.data() + pos_);
  std::string s(data_.data() + pos_, len);
  pos_ += len + 1;
  return s;
}

// ---- stack ----

size_t Parser::floor() const { return marks_.empty() ? 0 : marks_.back(); }

void Parser::push(Node* n) {
  if (stack_.size() >= g_.options.max_stack) {
    fail(str("pickle stack exceeds the limit of ", g_.options.max_stack, " entries"));
  }
  stack_.push_back(n);
}

Node* Parser::pop() {
  if (stack_.size() <= floor()) fail("stack underflow");
  Node* n = stack_.back();
  stack_.pop_back();
  return n;
}

Node* Parser::top() {
  if (stack_.size() <= floor()) fail("stack underflow");
  return stack_.back();
}

std::vector<Node*> Parser::pop_mark() {
  if (marks_.empty()) fail("no MARK to pop to");
  const size_t m = marks_.back();
  marks_.pop_back();
  std::vector<Node*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

void Parser::count_edges(size_t n) {
  edges_ += n;
  if (edges_ > g_.options.max_values) {
    fail(str("containers hold more than the limit of ", g_.options.max_values, " items"));
  }
}

// ---- node builders ----

Node* Parser::make_string(const char* p, uint64_t n, const char* what) {
  if (!valid_utf8(p, n)) fail(str(what, " is not valid UTF-8"));
  Node* node = g_.make(NodeKind::kString, *this);
  node->s.assign(p, n);
  return node;
}

Node* Parser::make_bytes() {
  if (g_.options.mode == ReadMode::kStrict) fail("bytes values are not supported");
  return g_.make(NodeKind::kBytes, *this);
}

Node* Parser::make_long(uint64_t n) {
  const char* p = need(n);
  Node* node = g_.make(NodeKind::kInt, *this);
  if (n == 0) return node;
  const bool negative = (static_cast<uint8_t>(p[n - 1]) & 0x80) != 0;
  for (uint64_t i = 8; i < n; ++i) {
    if (static_cast<uint8_t>(p[i]) != (negative ? 0xFF : 0x00)) {
      fail(str("integer of ", n, " bytes does not fit in int64"));
    }
  }
  uint64_t v = negative ? ~uint64_t{0} : 0;
  for (uint64_t i = 0; i < std::min<uint64_t>(n, 8); ++i) {
    v &= ~(uint64_t{0xFF} << (8 * i));
    v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  }
  if (n >= 8 && ((v >> 63) != 0) != negative) fail("integer does not fit in int64");
  node->i = static_cast<int64_t>(v);
  return node;
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

Node* Parser::make_object(const std::string& type, Node* args) {
  // Only reachable in tolerant mode: strict mode refused the global already.
  Node* node = g_.make(NodeKind::kObject, *this);
  node->s = type;
  node->a = args;
  return node;
}

void Parser::run() {
  while (true) {
    op_offset_ = pos_;
    const auto op = static_cast<uint8_t>(*need(1));
    switch (op) {
      case kProto: {
        const uint64_t v = read_uint(1);
        if (v > 5) fail(str("pickle protocol ", v, " is not supported"));
        break;
      }
      case kFrame: {
        const uint64_t n = read_uint(8);
        if (n > data_.size() - pos_) fail(str("FRAME of ", n, " bytes overruns the pickle"));
        break;
      }
      case kStop:
        if (stack_.size() != 1 || !marks_.empty()) fail("STOP with a malformed stack");
        g_.root = stack_.back();
        return;
      case kMark:
        if (marks_.size() >= g_.options.max_marks) {
          fail(str("more than ", g_.options.max_marks, " nested MARKs"));
        }
        marks_.push_back(stack_.size());
        break;
      case kPop:
        if (stack_.size() > floor()) {
          stack_.pop_back();
        } else {
          pop_mark();
        }
        break;
      case kPopMark:
        pop_mark();
        break;
      case kDup:
        push(top());
        break;
      case kNone:
        push(g_.make(NodeKind::kNone, *this));
        break;
      case kNewTrue:
      case kNewFalse: {
        Node* n = g_.make(NodeKind::kBool, *this);
        n->flag = op == kNewTrue;
        push(n);
        break;
      }
      case kBinInt: {
        Node* n = g_.make(NodeKind::kInt, *this);
        n->i = static_cast<int32_t>(static_cast<uint32_t>(read_uint(4)));
        push(n);
        break;
      }
      case kBinInt1:
      case kBinInt2: {
        Node* n = g_.make(NodeKind::kInt, *this);
        n->i = static_cast<int64_t>(read_uint(op == kBinInt1 ? 1 : 2));
        push(n);
        break;
      }
      case kLong1:
        push(make_long(read_uint(1)));
        break;
      case kLong4: {
        const auto n = static_cast<int32_t>(static_cast<uint32_t>(read_uint(4)));
        if (n < 0) fail("LONG4 with a negative length");
        push(make_long(static_cast<uint64_t>(n)));
        break;
      }
      case kBinFloat: {
        const char* p = need(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(p[i]);
        Node* n = g_.make(NodeKind::kDouble, *this);
        std::memcpy(&n->d, &bits, 8);
        push(n);
        break;
      }
      case kBinUnicode:
      case kShortBinUnicode:
      case kBinUnicode8: {
        const uint64_t n = read_uint(op == kBinUnicode ? 4 : op == kShortBinUnicode ? 1 : 8);
        push(make_string(need(n), n, "string"));
        break;
      }
      case kShortBinString:
      case kBinString: {
        const uint64_t n = read_uint(op == kShortBinString ? 1 : 4);
        if (op == kBinString && n > 0x7FFFFFFFu) fail("BINSTRING with a negative length");
        push(make_string(need(n), n, "string"));
        break;
      }
      case kBinBytes:
      case kShortBinBytes:
      case kBinBytes8: {
        const uint64_t n = read_uint(op == kBinBytes ? 4 : op == kShortBinBytes ? 1 : 8);
        need(n);
        push(make_bytes());
        break;
      }
      case kEmptyTuple:
        push(g_.make(NodeKind::kTuple, *this));
        break;
      case kTuple: {
        Node* n = g_.make(NodeKind::kTuple, *this);
        n->items = pop_mark();
        push(n);
        break;
      }
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        const size_t k = op - kTuple1 + 1;
        if (stack_.size() < floor() + k) fail("stack underflow");
        Node* n = g_.make(NodeKind::kTuple, *this);
        n->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(k), stack_.end());
        stack_.resize(stack_.size() - k);
        push(n);
        break;
      }
      case kEmptyList:
        push(g_.make(NodeKind::kList, *this));
        break;
      case kList: {
        Node* n = g_.make(NodeKind::kList, *this);
        n->items = pop_mark();
        count_edges(n->items.size());
        push(n);
        break;
      }
      case kAppend: {
        Node* v = pop();
        append_to(top(), {v});
        break;
      }
      case kAppends: {
        std::vector<Node*> items = pop_mark();
        append_to(top(), items);
        break;
      }
      case kEmptyDict:
        push(g_.make(NodeKind::kDict, *this));
        break;
      case kDict: {
        std::vector<Node*> items = pop_mark();
        Node* n = g_.make(NodeKind::kDict, *this);
        push(n);
        set_into(n, items);
        break;
      }
      case kSetItem: {
        Node* v = pop();
        Node* k = pop();
        set_into(top(), {k, v});
        break;
      }
      case kSetItems: {
        std::vector<Node*> items = pop_mark();
        set_into(top(), items);
        break;
      }
      case kEmptySet:
      case kFrozenSet: {
        if (g_.options.mode == ReadMode::kStrict) fail("Python sets are not supported");
        Node* n = g_.make(NodeKind::kSet, *this);
        if (op == kFrozenSet) n->items = pop_mark();
        count_edges(n->items.size());
        push(n);
        break;
      }
      case kAddItems: {
        std::vector<Node*> items = pop_mark();
        Node* t = top();
        if (t->kind != NodeKind::kSet) fail(str("ADDITEMS to a ", node_kind_name(t->kind)));
        count_edges(items.size());
        t->items.insert(t->items.end(), items.begin(), items.end());
        break;
      }
      case kGlobal: {
        std::string module = read_line();
        const std::string name = read_line();
        push(make_global(std::move(module), name));
        break;
      }
      case kStackGlobal: {
        Node* name = pop();
        Node* module = pop();
        if (name->kind != NodeKind::kString || module->kind != NodeKind::kString) {
          fail("STACK_GLOBAL needs two strings");
        }
        push(make_global(module->s, name->s));
        break;
      }
      case kReduce: {
        Node* args = pop();
        Node* fn = pop();
        push(reduce(fn, args));
        break;
      }
      case kBuild: {
        Node* state = pop();
        build(top(), state);
        break;
      }
      case kNewObj:
      case kNewObjEx: {
        if (op == kNewObjEx) pop();  // kwargs
        Node* args = pop();
        Node* cls = pop();
        if (g_.options.mode == ReadMode::kStrict || cls->kind != NodeKind::kGlobal) {
          fail(str("cannot instantiate a ",
                   cls->kind == NodeKind::kGlobal ? cls->s : node_kind_name(cls->kind)));
        }
        push(make_object(cls->s, args));
        break;
      }
      case kBinPersId:
        push(persistent(pop()));
        break;
      case kBinGet:
      case kLongBinGet: {
        const uint64_t idx = read_uint(op == kBinGet ? 1 : 4);
        auto it = memo_.find(idx);
        if (it == memo_.end()) fail(str("memo index ", idx, " is not defined"));
        push(it->second);
        break;
      }
      case kBinPut:
      case kLongBinPut:
      case kMemoize: {
        const uint64_t idx = op == kMemoize ? memo_.size() : read_uint(op == kBinPut ? 1 : 4);
        if (memo_.size() >= g_.options.max_nodes) fail("memo exceeds the node limit");
        memo_[idx] = top();
        break;
      }
      default:
        fail(str("unsupported pickle opcode 0x", std::hex, static_cast<int>(op)));
    }
  }
}

void Parser::append_to(Node* target, const std::vector<Node*>& items) {
  count_edges(items.size());
  if (target->kind == NodeKind::kList) {
    target->items.insert(target->items.end(), items.begin(), items.end());
  } else if (target->kind == NodeKind::kObject) {
    if (target->c == nullptr) target->c = g_.make(NodeKind::kList, *this);
    target->c->items.insert(target->c->items.end(), items.begin(), items.end());
  } else {
    fail(str("APPEND to a ", node_kind_name(target->kind)));
  }
}

void Parser::set_into(Node* target, const std::vector<Node*>& items) {
  if (items.size() % 2 != 0) fail("SETITEMS with an odd number of items");
  count_edges(items.size());
  if (target->kind == NodeKind::kDict) {
    target->items.insert(target->items.end(), items.begin(), items.end());
  } else if (target->kind == NodeKind::kObject) {
    if (target->e == nullptr) target->e = g_.make(NodeKind::kDict, *this);
    target->e->items.insert(target->e->items.end(), items.begin(), items.end());
  } else {
    fail(str("SETITEM on a ", node_kind_name(target->kind), " (only dicts take items)"));
  }
}

void Parser::build(Node* target, Node* state) {
  if (target->kind == NodeKind::kObject) {
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

}  // namespace detail

Value unpickle(const std::string& pickle, const StorageLoader& loader, const ReadOptions& options,
               const std::string& context) {
  detail::Graph graph(options, context);
  detail::Parser(graph, pickle).run();
  return graph.finish(loader);
}

}  // namespace zrt::ckpt
