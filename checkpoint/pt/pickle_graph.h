// Internal to the unpickler (include only from unpickler.cpp / pickle_graph.cpp): the object
// graph a pickle builds (nodes owned by an arena, shared through the memo), the opcode parser that
// builds it, and the last step that loads the needed storages and expands the graph into a Value
// tree under the size, depth and cycle limits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "checkpoint/pt/unpickler.h"

namespace zrt::ckpt::detail {

enum class NodeKind : uint8_t {
  kNone,
  kBool,
  kInt,
  kDouble,
  kString,
  kBytes,
  kList,
  kTuple,
  kDict,
  kSet,
  kSize,
  kTensor,
  kStorage,
  kGlobal,
  kObject
};
const char* node_kind_name(NodeKind kind);

struct Node {
  explicit Node(NodeKind k) : kind(k) {}
  NodeKind kind;
  bool flag = false;      // bool value; OrderedDict
  bool visiting = false;  // on the current expansion path (cycle check)
  bool reached = false;   // reachable from the kept roots
  int64_t i = 0;          // int value; index into Graph::tensors / Graph::storages
  double d = 0;
  std::string s;              // str; global or object type name; storage key
  std::vector<Node*> items;   // list / tuple / set items; dict keys and values interleaved
  std::vector<int64_t> dims;  // torch.Size
  Node* a = nullptr;          // object: args
  Node* b = nullptr;          // object: BUILD state
  Node* c = nullptr;          // object: APPENDed items (a kList node)
  Node* e = nullptr;          // object: SETITEM items (a kDict node)
};

struct StorageInfo {
  std::string key;
  at::ScalarType dtype = at::kFloat;
  int64_t numel = 0;
  bool needed = false;
  at::Tensor data;
};

struct TensorInfo {
  Node* storage = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
  at::Tensor value;
};

class Parser;

class Graph {
 public:
  Graph(const ReadOptions& opts, std::string ctx) : options(opts), context(std::move(ctx)) {}

  Node* make(NodeKind kind, const Parser& parser);
  Node* declare_storage(const Parser& parser, const std::string& key, at::ScalarType dtype,
                        int64_t numel);
  // Loads the storages of reachable tensors and expands the kept part of the graph.
  Value finish(const StorageLoader& loader);

  const ReadOptions& options;
  const std::string context;
  Node* root = nullptr;
  std::vector<StorageInfo> storages;
  std::vector<TensorInfo> tensors;

 private:
  [[noreturn]] void fail(const std::string& message) const;
  void mark_reachable(Node* from);
  Value expand(Node* n, int depth);
  Value expand_dict(Node* n, int depth);

  std::vector<std::unique_ptr<Node>> arena_;
  std::unordered_map<std::string, Node*> storage_nodes_;
  size_t values_ = 0;
};

class Parser {
 public:
  Parser(Graph& graph, const std::string& data) : g_(graph), data_(data) {}
  // Runs the opcodes up to STOP; sets graph.root.
  void run();
  [[noreturn]] void fail(const std::string& message) const;

 private:
  const char* need(uint64_t n);
  uint64_t read_uint(int bytes);  // little-endian
  std::string read_line();
  size_t floor() const;
  void push(Node* n);
  Node* pop();
  Node* top();
  std::vector<Node*> pop_mark();
  void count_edges(size_t n);

  Node* make_string(const char* p, uint64_t n, const char* what);
  Node* make_bytes();
  Node* make_long(uint64_t n);
  Node* make_global(std::string module, const std::string& name);
  Node* make_object(const std::string& type, Node* args);
  // NEWOBJ: cls(*args) as an object placeholder; strict mode only for the plain data classes of
  // the allowlist, with no arguments.
  Node* new_object(Node* cls, Node* args);
  void append_to(Node* target, const std::vector<Node*>& items);
  void set_into(Node* target, const std::vector<Node*>& items);
  void build(Node* target, Node* state);
  Node* reduce(Node* fn, Node* args);
  Node* persistent(Node* pid);
  Node* rebuild_tensor(const std::vector<Node*>& args);
  std::vector<int64_t> int_list(Node* n, const char* what, int64_t min_value, size_t max_len);

  Graph& g_;
  const std::string& data_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;
  size_t edges_ = 0;
  std::vector<Node*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Node*> memo_;
};

// "torch.float16", ...: a torch dtype of tensor_types.h as a global name (strict mode allows
// these as values).
bool is_torch_dtype_global(const std::string& name);

}  // namespace zrt::ckpt::detail
