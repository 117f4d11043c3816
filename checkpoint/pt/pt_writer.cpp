#include <algorithm>
#include <cstring>
#include <exception>
#include <unordered_map>

#include "checkpoint/hash.h"
#include "checkpoint/pt/pickler.h"
#include "checkpoint/pt/pt_file.h"
#include "core/error.h"
#include <caffe2/serialize/inline_container.h>
#include <torch/version.h>

// PyTorchStreamWriter(writer_func, compute_crc32) exists from LibTorch 2.6 on.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define ZRT_ZIP_CRC_FILLED_HERE 1
#else
#define ZRT_ZIP_CRC_FILLED_HERE 0
#endif

namespace zrt::ckpt {

#if ZRT_ZIP_CRC_FILLED_HERE
namespace {

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Note [Zip CRCs filled in here]
// PyTorchStreamWriter writes each record as a local header with general-purpose bit 3 set (CRC
// and sizes 0), the data, then a data descriptor ("PK\7\8", CRC-32, sizes), and repeats the CRC
// in the central directory. It computes the CRC with miniz's byte-table loop (about 3 GB/s here)
// on the thread that produces the file before the record's first byte goes out: for a checkpoint
// that is 0.3 s per GiB with the device idle. With LibTorch >= 2.6 the writer runs with
// compute_crc32 = false, which leaves 0 in the descriptors and the central directory (and in the
// CRC half of .data/serialization_id, an identifier nothing reads back), and this filter writes
// the CRCs in as the bytes pass on to the sink:
//  * a record we write ourselves (data.pkl, data/<key>): its CRC is computed beforehand with
//    hash.h's carry-less-multiply CRC (about 12 GB/s; expect() before writeRecord); its
//    header and data pass straight through (the data stays a borrowed chunk) and its descriptor,
//    the first write after `size` data bytes, is patched;
//  * a record the writer adds itself (version, byteorder, serialization id: a few bytes) is held
//    back until its descriptor arrives (a write that starts with the descriptor's signature and
//    gives the held size), then its CRC is computed and the descriptor patched;
//  * the central directory and the end records, written by writeEndOfFile, are held back until
//    finish(), which patches every central entry's CRC from its name.
// An empty record has no descriptor (bit 3 clear, CRC 0). A layout this does not expect (a
// non-empty record without a descriptor, a descriptor missing or of the wrong size, an unknown
// central entry) is a CheckpointError: a file is never committed with a wrong CRC.
// tests/checkpoint/pickle_test.cpp (PtWriter.*) checks every CRC of an archive; interop_test.cpp
// compares the records with torch.save's.
class ZipCrcFilter {
 public:
  explicit ZipCrcFilter(ByteSink& sink) : sink_(sink) {}

  // The next record's name (without the archive folder), CRC and size: its data is ours and
  // known before its header is written.
  void expect(const std::string& name, uint32_t crc, uint64_t size) {
    expected_name_ = "/" + name;
    expected_crc_ = crc;
    expected_size_ = size;
    expecting_ = true;
  }

  // One write of the zip writer; `borrowed`: `data` is tensor data that outlives the save.
  void write(const void* data, size_t size, bool borrowed) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      size_t used = 0;
      switch (state_) {
        case State::kTail:
          tail_.append(p, size);
          used = size;
          break;
        case State::kHeader:
          used = start_record(p, size);
          break;
        case State::kNameExtra: {
          used = static_cast<size_t>(std::min<uint64_t>(left_, size));
          const size_t naming = std::min<size_t>(used, name_left_);
          name_.append(p, naming);
          name_left_ -= naming;
          sink_.write(p, used);
          left_ -= used;
          if (left_ == 0) start_data();
          break;
        }
        case State::kData:
          used = static_cast<size_t>(std::min<uint64_t>(left_, size));
          borrowed ? sink_.write_borrowed(p, used) : sink_.write(p, used);
          left_ -= used;
          if (left_ == 0) state_ = State::kDescriptor;
          break;
        case State::kHeldData:
          if (!is_descriptor(p, size, held_data_.size())) {
            held_data_.append(p, size);
            ZRT_CHECK_AS(CheckpointError, held_data_.size() < (1u << 20), "zip writer: record '",
                         name_, "' of its own is past 1 MiB");
            used = size;
            break;
          }
          crc_ = crc32(held_data_.data(), held_data_.size());
          data_size_ = held_data_.size();
          sink_.write(held_data_.data(), held_data_.size());
          held_data_.clear();
          state_ = State::kDescriptor;
          break;  // the same write is the descriptor
        case State::kDescriptor:
          ZRT_CHECK_AS(CheckpointError, is_descriptor(p, size, data_size_),
                       "zip writer: no data descriptor after the ", data_size_,
                       " bytes of record '", name_, "'");
          finish_record(p, size);
          used = size;
          break;
      }
      p += used;
      size -= used;
    }
  }

  // After writeEndOfFile: patches every central-directory entry's CRC and writes the directory
  // with the end records.
  void finish() {
    ZRT_CHECK_AS(CheckpointError, state_ == State::kTail,
                 "zip writer: the archive ended inside a record");
    char* p = &tail_[0];
    size_t at = 0, entries = 0;
    while (at + 46 <= tail_.size() && le32(reinterpret_cast<uint8_t*>(p + at)) == 0x02014b50) {
      const uint8_t* e = reinterpret_cast<uint8_t*>(p + at);
      const size_t name_len = le16(e + 28), extra_len = le16(e + 30), comment_len = le16(e + 32);
      ZRT_CHECK_AS(CheckpointError, at + 46 + name_len <= tail_.size(),
                   "zip writer: a central-directory entry runs past the archive");
      const std::string name(p + at + 46, name_len);
      auto it = crcs_.find(name);
      ZRT_CHECK_AS(CheckpointError, it != crcs_.end(), "zip writer: central-directory entry '",
                   name, "' names no record written");
      put_le32(reinterpret_cast<uint8_t*>(p + at + 16), it->second);
      at += 46 + name_len + extra_len + comment_len;
      ++entries;
    }
    ZRT_CHECK_AS(CheckpointError, entries == crcs_.size(), "zip writer: ", crcs_.size(),
                 " records but ", entries, " central-directory entries");
    sink_.write(tail_.data(), tail_.size());
    tail_.clear();
  }

 private:
  enum class State { kHeader, kNameExtra, kData, kHeldData, kDescriptor, kTail };

  // A data descriptor of a record of `size` bytes: signature, CRC, then the sizes (4 bytes each,
  // 8 with zip64).
  static bool is_descriptor(const char* p, size_t size, uint64_t data_size) {
    const uint8_t* d = reinterpret_cast<const uint8_t*>(p);
    if (size == 16 && le32(d) == 0x08074b50) return le32(d + 8) == data_size;
    if (size == 24 && le32(d) == 0x08074b50) {
      return (static_cast<uint64_t>(le32(d + 12)) << 32 | le32(d + 8)) == data_size;
    }
    return false;
  }

  // At a record boundary: a local header (30 bytes) or the central directory. Returns the bytes
  // used.
  size_t start_record(const char* p, size_t size) {
    const uint8_t* h = reinterpret_cast<const uint8_t*>(p);
    if (size >= 4 && le32(h) == 0x02014b50) {
      ZRT_CHECK_AS(CheckpointError, !expecting_, "zip writer: no record for a computed CRC");
      state_ = State::kTail;
      return 0;
    }
    ZRT_CHECK_AS(CheckpointError, size >= 30 && le32(h) == 0x04034b50,
                 "zip writer: expected a local header, got a write of ", size, " bytes",
                 size >= 4 ? str(" starting 0x", crc32_hex(le32(h))) : "", " after record '",
                 name_, "'");
    // Without bit 3 (no descriptor) only an empty record: its CRC and sizes are 0 in the header.
    descriptor_ = (le16(h + 6) & 8) != 0;
    ZRT_CHECK_AS(CheckpointError,
                 descriptor_ || (le32(h + 18) == 0 && le32(h + 22) == 0 &&
                                 (!expecting_ || expected_size_ == 0)),
                 "zip writer: a record without a data descriptor that is not empty");
    name_.clear();
    name_left_ = le16(h + 26);
    left_ = name_left_ + le16(h + 28);
    held_ = !expecting_;
    if (expecting_) {
      crc_ = expected_crc_;
      data_size_ = expected_size_;
      expecting_ = false;
    }
    sink_.write(p, 30);
    state_ = State::kNameExtra;
    if (left_ == 0) start_data();
    return 30;
  }

  // After the name and extra field.
  void start_data() {
    ZRT_CHECK_AS(CheckpointError,
                 held_ || (name_.size() >= expected_name_.size() &&
                           name_.compare(name_.size() - expected_name_.size(),
                                         expected_name_.size(), expected_name_) == 0),
                 "zip writer: record '", name_, "' where '", expected_name_.substr(1),
                 "' was expected");
    if (!descriptor_) {  // an empty record: complete
      crc_ = 0;
      add_crc();
      return;
    }
    if (held_) {
      state_ = State::kHeldData;
      return;
    }
    left_ = data_size_;
    state_ = left_ > 0 ? State::kData : State::kDescriptor;
  }

  void finish_record(const char* p, size_t size) {
    std::string descriptor(p, size);
    put_le32(reinterpret_cast<uint8_t*>(&descriptor[0]) + 4, crc_);
    sink_.write(descriptor.data(), descriptor.size());
    add_crc();
  }

  void add_crc() {
    ZRT_CHECK_AS(CheckpointError, crcs_.emplace(name_, crc_).second, "zip writer: record '",
                 name_, "' written twice");
    state_ = State::kHeader;
  }

  ByteSink& sink_;
  State state_ = State::kHeader;
  bool expecting_ = false, held_ = false, descriptor_ = true;
  uint32_t expected_crc_ = 0, crc_ = 0;
  uint64_t expected_size_ = 0, data_size_ = 0, left_ = 0, name_left_ = 0;
  std::string name_, held_data_, tail_, expected_name_;
  std::unordered_map<std::string, uint32_t> crcs_;
};

}  // namespace
#endif  // ZRT_ZIP_CRC_FILLED_HERE

// Note [Sink errors inside the zip writer]
// PyTorchStreamWriter calls our writer function from miniz's C code, so an exception must not
// cross it, and its destructor finalizes the archive (throwing there would terminate). A failed
// sink write is therefore recorded, later bytes are discarded while still reported as written,
// no further records are started, and the recorded error is rethrown once the writer is gone.
//
// The bytes of the record being written come to the writer function as one pointer into the
// tensor's storage, which stays alive until this function returns: they go to the sink as a
// borrowed chunk (no copy), and sync_borrowed() below waits until the sink is done with them.
void write_pt(const Value& value, ByteSink& sink) {
  PickleResult pickle = pickle_value(value);
  std::exception_ptr error;
  const PickledStorage* current = nullptr;  // the storage whose record is being written
#if ZRT_ZIP_CRC_FILLED_HERE
  ZipCrcFilter filter(sink);
  auto emit = [&](const void* data, size_t size, bool borrowed) {
    filter.write(data, size, borrowed);
  };
  // Note [Zip CRCs filled in here]
  auto expect = [&](const std::string& name, const void* data, size_t size) {
    filter.expect(name, crc32(data, size), size);
  };
#else
  auto emit = [&](const void* data, size_t size, bool borrowed) {
    borrowed ? sink.write_borrowed(data, size) : sink.write(data, size);
  };
  auto expect = [](const std::string&, const void*, size_t) {};
#endif
  auto writer_func = [&](const void* data, size_t size) -> size_t {
    if (!error) {
      try {
        const char* p = static_cast<const char*>(data);
        const char* base = current ? static_cast<const char*>(current->data) : nullptr;
        emit(data, size, base != nullptr && p >= base && p + size <= base + current->nbytes);
      } catch (...) {
        error = std::current_exception();
      }
    }
    return size;
  };
  // torch.save writes storages in the sorted order of their (string) keys.
  std::vector<const PickledStorage*> order;
  for (const auto& s : pickle.storages) order.push_back(&s);
  std::sort(order.begin(), order.end(),
            [](const PickledStorage* a, const PickledStorage* b) { return a->key < b->key; });
  static const char kEmpty = 0;
  try {
#if ZRT_ZIP_CRC_FILLED_HERE
    caffe2::serialize::PyTorchStreamWriter writer(writer_func, /*compute_crc32=*/false);
#else
    caffe2::serialize::PyTorchStreamWriter writer(writer_func);
#endif
    expect("data.pkl", pickle.bytes.data(), pickle.bytes.size());
    writer.writeRecord("data.pkl", pickle.bytes.data(), pickle.bytes.size());
    for (const PickledStorage* s : order) {
      if (error) break;
      current = s;
      const void* data = s->nbytes ? s->data : &kEmpty;
      expect("data/" + s->key, data, s->nbytes);
      writer.writeRecord("data/" + s->key, data, s->nbytes);
      current = nullptr;
    }
    writer.writeEndOfFile();
#if ZRT_ZIP_CRC_FILLED_HERE
    if (!error) filter.finish();
#endif
  } catch (const c10::Error& e) {
    // The writer's own failure comes first: sink errors never make it throw (writer_func reports
    // every byte as written), but the records it writes while unwinding may upset the filter.
    error = std::make_exception_ptr(
        CheckpointError(str("zip writer failed: ", e.what_without_backtrace())));
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  try {
    sink.sync_borrowed();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
}

std::string pt_bytes(const Value& value) {
  StringSink sink;
  write_pt(value, sink);
  return sink.take();
}

FileInfo save_pt(const Value& value, const std::string& path, Storage* storage) {
  PosixStorage posix;
  Storage& s = storage ? *storage : posix;
  return s.write_file_atomic(path, [&](ByteSink& sink) { write_pt(value, sink); });
}

}  // namespace zrt::ckpt
