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
void write_pt(const Value& value, ByteSink& sink) {
  PickleResult pickle = pickle_value(value);
  std::exception_ptr error;
  auto writer_func = [&](const void* data, size_t size) -> size_t {
    if (!error) {
      try {
        sink.write(data, size);
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
      writer.writeRecord("data/" + s->key, s->nbytes ? s->data : &kEmpty, s->nbytes);
    }
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    if (!error) throw CheckpointError(str("zip writer failed: ", e.what_without_backtrace()));
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
