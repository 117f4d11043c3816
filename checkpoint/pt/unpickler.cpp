#include "checkpoint/pt/unpickler.h"

#include <cstring>
#include <limits>
#include <unordered_map>

#include "checkpoint/pt/pickle_graph.h"
#include "checkpoint/tensor_types.h"
#include "core/error.h"

namespace zrt::ckpt {
namespace detail {
namespace {

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
        count_edges(n->items.size());
        push(n);
        break;
      }
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        const size_t k = op - kTuple1 + 1;
        if (stack_.size() < floor() + k) fail("stack underflow");
        Node* n = g_.make(NodeKind::kTuple, *this);
        count_edges(k);
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
        if (op == kNewObjEx) {
          if (g_.options.mode == ReadMode::kStrict) fail("NEWOBJ_EX is not supported");
          pop();  // kwargs
        }
        Node* args = pop();
        Node* cls = pop();
        push(new_object(cls, args));
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
  } else if (target->kind == NodeKind::kObject && g_.options.mode == ReadMode::kTolerant) {
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
  } else if (target->kind == NodeKind::kObject && g_.options.mode == ReadMode::kTolerant) {
    if (target->e == nullptr) target->e = g_.make(NodeKind::kDict, *this);
    target->e->items.insert(target->e->items.end(), items.begin(), items.end());
  } else {
    fail(str("SETITEM on a ", node_kind_name(target->kind), " (only dicts take items)"));
  }
}

}  // namespace detail

Value unpickle(const std::string& pickle, const StorageLoader& loader, const ReadOptions& options,
               const std::string& context) {
  detail::Graph graph(options, context);
  detail::Parser(graph, pickle).run();
  return graph.finish(loader);
}

}  // namespace zrt::ckpt
