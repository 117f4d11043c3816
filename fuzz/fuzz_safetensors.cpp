// libFuzzer target: the safetensors reader (ckpt::read_safetensors). A file it accepts must be
// written back by write_safetensors and read again with the same names, dtypes, shapes, bytes and
// metadata. CheckpointError is a clean rejection; anything else aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <ATen/ATen.h>

#include "checkpoint/io.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/logging.h"

namespace {

using zrt::ckpt::SafetensorsFile;

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "fuzz_safetensors: BUG: %s\n", what.c_str());
  std::abort();
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() &&
         (ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zrt::set_log_level(zrt::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zrt::ckpt::MemorySource source(std::string(reinterpret_cast<const char*>(data), size),
                                 "fuzz.safetensors");
  SafetensorsFile file;
  try {
    file = zrt::ckpt::read_safetensors(source);
  } catch (const zrt::InternalError& e) {
    bug(std::string("InternalError: ") + e.what());
  } catch (const zrt::CheckpointError&) {
    return 0;
  }
  zrt::ckpt::StringSink sink;
  try {
    zrt::ckpt::write_safetensors(file.tensors, sink, file.metadata);
  } catch (const zrt::Error& e) {
    bug(std::string("an accepted file cannot be written back: ") + e.what());
  }
  SafetensorsFile again;
  try {
    again = zrt::ckpt::read_safetensors(zrt::ckpt::MemorySource(sink.take(), "rewritten"));
  } catch (const zrt::Error& e) {
    bug(std::string("a rewritten file cannot be read: ") + e.what());
  }
  if (again.tensors.size() != file.tensors.size() || again.metadata != file.metadata) {
    bug("the rewritten file differs in tensors or metadata");
  }
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    if (again.tensors[i].first != file.tensors[i].first ||
        !same_bytes(again.tensors[i].second, file.tensors[i].second)) {
      bug("tensor '" + file.tensors[i].first + "' differs after rewriting");
    }
  }
  return 0;
}
