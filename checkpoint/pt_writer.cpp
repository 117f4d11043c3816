#include <algorithm>
#include <exception>

#include "checkpoint/pickler.h"
#include "checkpoint/pt_file.h"
#include "core/error.h"
#include <caffe2/serialize/inline_container.h>

namespace zrt::ckpt {

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
  auto writer_func = [&](const void* data, size_t size) -> size_t {
    if (!error) {
      try {
        const char* p = static_cast<const char*>(data);
        const char* base = current ? static_cast<const char*>(current->data) : nullptr;
        if (base != nullptr && p >= base && p + size <= base + current->nbytes) {
          sink.write_borrowed(data, size);
        } else {
          sink.write(data, size);
        }
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
    caffe2::serialize::PyTorchStreamWriter writer(writer_func);
    writer.writeRecord("data.pkl", pickle.bytes.data(), pickle.bytes.size());
    for (const PickledStorage* s : order) {
      if (error) break;
      current = s;
      writer.writeRecord("data/" + s->key, s->nbytes ? s->data : &kEmpty, s->nbytes);
      current = nullptr;
    }
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    if (!error) {
      error = std::make_exception_ptr(
          CheckpointError(str("zip writer failed: ", e.what_without_backtrace())));
    }
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
