#include "checkpoint/pt/pickler.h"

#include <cstring>
#include <unordered_map>

#include "checkpoint/tensor_types.h"
#include "core/error.h"

namespace zrt::ckpt {
namespace {

// Note [What torch.save emits]
// torch.save pickles with protocol 2 and the standard Python pickler, whose output we reproduce
// byte for byte for the value subset (checked against Python in the tests):
//   * every str, non-empty tuple, list, dict, global and reduce result is memoized (BINPUT, or
//     LONG_BINPUT from index 256 on); a second use of the same global or an equal str is a BINGET
//     (Python shares by object identity; equal strs are interchangeable for a reader);
//   * ints use BININT1 / BININT2 / BININT by range, else LONG1 with the minimal two's complement;
//   * tuples of 1-3 items use TUPLE1-3, longer ones MARK ... TUPLE; the empty tuple is not
//   memoized;
//   * list and dict items go in batches of 1000 (MARK ... APPENDS / SETITEMS; a batch of one is
//     APPEND / SETITEM);
//   * OrderedDict is `collections.OrderedDict()` (GLOBAL, EMPTY_TUPLE, REDUCE) plus SETITEMS;
//     torch.Size is `torch.Size((d0, d1, ...))`;
//   * a tensor is `torch._utils._rebuild_tensor_v2(pid, offset, size, stride, False,
//   OrderedDict())`
//     where pid = ('storage', torch.<T>Storage, key, 'cpu', numel) is written with BINPERSID.
//     Tensors sharing a storage share its key, so the storage is written once.
//   * an object Value is a Python object of a named class: with no args, state or items it is a
//     reference to the global itself (GLOBAL, e.g. `torch float16`); with args `()` it is an
//     instance made the way protocol 2 pickles a plain object (copyreg.__newobj__: GLOBAL cls,
//     EMPTY_TUPLE, NEWOBJ, memoized) and, when it has a state, `state` then BUILD. That is how
//     DeepSpeed's loss scalers are written (checkpoint/ds_objects.h). Other objects (what the
//     tolerant reader keeps of calls it did not make) are refused.
// Python 1.13's weights_only reader lacks BINFLOAT: files holding a float load with
// weights_only=True only on torch >= 2 (see FORMAT.md).

constexpr char kProto = '\x80';
constexpr char kStop = '.';
constexpr char kMark = '(';
constexpr char kNone = 'N';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kBinInt = 'J';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kLong1 = '\x8a';
constexpr char kBinFloat = 'G';
constexpr char kBinUnicode = 'X';
constexpr char kEmptyTuple = ')';
constexpr char kTuple = 't';
constexpr char kTuple1 = '\x85';
constexpr char kEmptyList = ']';
constexpr char kAppend = 'a';
constexpr char kAppends = 'e';
constexpr char kEmptyDict = '}';
constexpr char kSetItem = 's';
constexpr char kSetItems = 'u';
constexpr char kGlobal = 'c';
constexpr char kReduce = 'R';
constexpr char kNewObj = '\x81';
constexpr char kBuild = 'b';
constexpr char kBinPersId = 'Q';
constexpr char kBinGet = 'h';
constexpr char kLongBinGet = 'j';
constexpr char kBinPut = 'q';
constexpr char kLongBinPut = 'r';
constexpr size_t kBatchSize = 1000;

std::string child(const std::string& path, const Key& key) {
  if (key.is_int()) return path + "[" + std::to_string(key.as_int()) + "]";
  return path.empty() ? key.as_str() : path + "." + key.as_str();
}

class Pickler {
 public:
  PickleResult run(const Value& v) {
    out_.push_back(kProto);
    out_.push_back('\x02');
    save(v, "");
    out_.push_back(kStop);
    return PickleResult{std::move(out_), std::move(storages_)};
  }

 private:
  void put_u32(uint32_t x) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
  }

  uint32_t memoize() {
    const uint32_t idx = next_memo_++;
    if (idx < 256) {
      out_.push_back(kBinPut);
      out_.push_back(static_cast<char>(idx));
    } else {
      out_.push_back(kLongBinPut);
      put_u32(idx);
    }
    return idx;
  }

  void get(uint32_t idx) {
    if (idx < 256) {
      out_.push_back(kBinGet);
      out_.push_back(static_cast<char>(idx));
    } else {
      out_.push_back(kLongBinGet);
      put_u32(idx);
    }
  }

  void global(const std::string& module, const std::string& name) {
    std::string key = module + "\n" + name + "\n";
    auto it = globals_.find(key);
    if (it != globals_.end()) return get(it->second);
    out_.push_back(kGlobal);
    out_ += key;
    globals_.emplace(std::move(key), memoize());
  }

  void string(const std::string& s) {
    auto it = strings_.find(s);
    if (it != strings_.end()) return get(it->second);
    ZRT_CHECK_AS(CheckpointError, s.size() <= 0xFFFFFFFFu, "string of ", s.size(),
                 " bytes is too long to pickle");
    out_.push_back(kBinUnicode);
    put_u32(static_cast<uint32_t>(s.size()));
    out_ += s;
    strings_.emplace(s, memoize());
  }

  void integer(int64_t v) {
    if (v >= 0 && v <= 0xFF) {
      out_.push_back(kBinInt1);
      out_.push_back(static_cast<char>(v));
    } else if (v >= 0 && v <= 0xFFFF) {
      out_.push_back(kBinInt2);
      out_.push_back(static_cast<char>(v & 0xFF));
      out_.push_back(static_cast<char>(v >> 8));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_.push_back(kBinInt);
      put_u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
    } else {
      // The fewest little-endian two's-complement bytes that hold v (what Python writes).
      int n = 8;
      while (n > 1) {
        const int64_t lo = -(int64_t{1} << (8 * (n - 1) - 1));
        const int64_t hi = (int64_t{1} << (8 * (n - 1) - 1)) - 1;
        if (v < lo || v > hi) break;
        --n;
      }
      out_.push_back(kLong1);
      out_.push_back(static_cast<char>(n));
      const auto u = static_cast<uint64_t>(v);
      for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
    }
  }

  void floating(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    out_.push_back(kBinFloat);
    for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
  }

  // Python's save_tuple: elements, then TUPLE1-3 or MARK...TUPLE, memoized; () alone.
  template <typename SaveItem>
  void tuple_of(size_t n, SaveItem save_item) {
    if (n == 0) {
      out_.push_back(kEmptyTuple);
      return;
    }
    if (n > 3) out_.push_back(kMark);
    for (size_t i = 0; i < n; ++i) save_item(i);
    out_.push_back(n > 3 ? kTuple : static_cast<char>(kTuple1 + (n - 1)));
    memoize();
  }

  void dict_items(const Dict& d, const std::string& path) {
    const auto& items = d.items();
    for (size_t start = 0; start < items.size(); start += kBatchSize) {
      const size_t end = std::min(items.size(), start + kBatchSize);
      if (end - start > 1) out_.push_back(kMark);
      for (size_t i = start; i < end; ++i) {
        const Key& k = items[i].first;
        if (k.is_int()) {
          integer(k.as_int());
        } else {
          string(k.as_str());
        }
        save(items[i].second, child(path, k));
      }
      out_.push_back(end - start > 1 ? kSetItems : kSetItem);
    }
  }

  void save(const Value& v, const std::string& path) {
    switch (v.kind()) {
      case ValueKind::kNone:
        out_.push_back(kNone);
        return;
      case ValueKind::kBool:
        out_.push_back(v.as_bool() ? kNewTrue : kNewFalse);
        return;
      case ValueKind::kInt:
        integer(v.as_int());
        return;
      case ValueKind::kDouble:
        floating(v.as_double());
        return;
      case ValueKind::kString:
        string(v.as_string());
        return;
      case ValueKind::kTuple: {
        const auto& items = v.items();
        tuple_of(items.size(),
                 [&](size_t i) { save(items[i], path + "[" + std::to_string(i) + "]"); });
        return;
      }
      case ValueKind::kList: {
        out_.push_back(kEmptyList);
        memoize();
        const auto& items = v.items();
        for (size_t start = 0; start < items.size(); start += kBatchSize) {
          const size_t end = std::min(items.size(), start + kBatchSize);
          if (end - start > 1) out_.push_back(kMark);
          for (size_t i = start; i < end; ++i) {
            save(items[i], path + "[" + std::to_string(i) + "]");
          }
          out_.push_back(end - start > 1 ? kAppends : kAppend);
        }
        return;
      }
      case ValueKind::kDict:
        if (v.is_ordered_dict()) {
          global("collections", "OrderedDict");
          out_.push_back(kEmptyTuple);
          out_.push_back(kReduce);
        } else {
          out_.push_back(kEmptyDict);
        }
        memoize();
        dict_items(v.as_dict(), path);
        return;
      case ValueKind::kSize: {
        const auto& dims = v.as_size();
        global("torch", "Size");
        tuple_of(1, [&](size_t) { tuple_of(dims.size(), [&](size_t i) { integer(dims[i]); }); });
        out_.push_back(kReduce);
        memoize();
        return;
      }
      case ValueKind::kTensor:
        tensor(v.as_tensor(), path);
        return;
      case ValueKind::kObject:
        object(v.as_object(), path);
        return;
    }
  }

  void object(const ObjectData& o, const std::string& path) {
    const size_t dot = o.type.rfind('.');
    const bool items = !o.list_items.is_none() || !o.dict_items.is_none();
    const bool reference = o.args.is_none() && o.state.is_none() && !items;
    const bool instance = o.args.is_tuple() && o.args.items().empty() && !items;
    if (dot == std::string::npos || dot == 0 || dot + 1 == o.type.size() ||
        !(reference || instance)) {
      throw CheckpointError(str("cannot write ", path.empty() ? "<root>" : path,
                                ": it is a placeholder for a Python object of type ", o.type,
                                " (read in tolerant mode)"));
    }
    global(o.type.substr(0, dot), o.type.substr(dot + 1));
    if (reference) return;
    out_.push_back(kEmptyTuple);
    out_.push_back(kNewObj);
    memoize();
    if (o.state.is_none()) return;
    save(o.state, path);
    out_.push_back(kBuild);
  }

  void tensor(const at::Tensor& t, const std::string& path) {
    const std::string where = path.empty() ? "<root>" : path;
    ZRT_CHECK_AS(CheckpointError, t.defined(), "cannot write ", where, ": undefined tensor");
    ZRT_CHECK_AS(CheckpointError, t.device().is_cpu(), "cannot write ", where, ": tensor is on ",
                 t.device(), "; copy it to the CPU first");
    ZRT_CHECK_AS(CheckpointError, t.layout() == at::kStrided && !t.is_quantized(), "cannot write ",
                 where, ": only dense (strided) tensors are supported");
    ZRT_CHECK_AS(CheckpointError, is_checkpoint_dtype(t.scalar_type()), "cannot write ", where,
                 ": tensor dtype ", c10::toString(t.scalar_type()), " is not supported");
    const c10::Storage& storage = t.storage();
    const int64_t itemsize = dtype_itemsize(t.scalar_type());
    ZRT_CHECK_AS(CheckpointError, storage.nbytes() % static_cast<size_t>(itemsize) == 0,
                 "cannot write ", where, ": storage of ", storage.nbytes(),
                 " bytes is not a whole number of ", c10::toString(t.scalar_type()), " elements");
    const c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    auto it = storage_index_.find(impl);
    size_t index;
    if (it == storage_index_.end()) {
      index = storages_.size();
      PickledStorage s;
      s.key = std::to_string(index);
      s.dtype = t.scalar_type();
      s.numel = static_cast<int64_t>(storage.nbytes()) / itemsize;
      s.data = storage.data();
      s.nbytes = storage.nbytes();
      s.storage = storage;
      storages_.push_back(std::move(s));
      storage_index_.emplace(impl, index);
    } else {
      index = it->second;
      ZRT_CHECK_AS(CheckpointError, storages_[index].dtype == t.scalar_type(), "cannot write ",
                   where, ": it views the storage of an earlier ",
                   c10::toString(storages_[index].dtype), " tensor as ",
                   c10::toString(t.scalar_type()), " (torch.save refuses this too)");
    }
    const PickledStorage& s = storages_[index];

    global("torch._utils", "_rebuild_tensor_v2");
    out_.push_back(kMark);
    // The persistent id tuple ('storage', torch.<T>Storage, key, 'cpu', numel).
    tuple_of(5, [&](size_t i) {
      switch (i) {
        case 0:
          string("storage");
          break;
        case 1:
          global("torch", storage_class_name(s.dtype));
          break;
        case 2:
          string(s.key);
          break;
        case 3:
          string("cpu");
          break;
        default:
          integer(s.numel);
          break;
      }
    });
    out_.push_back(kBinPersId);
    integer(t.storage_offset());
    const auto sizes = t.sizes();
    const auto strides = t.strides();
    tuple_of(sizes.size(), [&](size_t i) { integer(sizes[i]); });
    tuple_of(strides.size(), [&](size_t i) { integer(strides[i]); });
    out_.push_back(kNewFalse);  // requires_grad (state dicts hold detached tensors)
    global("collections", "OrderedDict");
    out_.push_back(kEmptyTuple);
    out_.push_back(kReduce);
    memoize();
    out_.push_back(kTuple);
    memoize();
    out_.push_back(kReduce);
    memoize();
  }

  std::string out_;
  uint32_t next_memo_ = 0;
  std::unordered_map<std::string, uint32_t> globals_;
  std::unordered_map<std::string, uint32_t> strings_;
  std::unordered_map<const c10::StorageImpl*, size_t> storage_index_;
  std::vector<PickledStorage> storages_;
};

}  // namespace

PickleResult pickle_value(const Value& value) { return Pickler().run(value); }

}  // namespace zrt::ckpt
