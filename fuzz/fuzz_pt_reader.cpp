// libFuzzer target: the .pt reader (zip container + unpickler, ckpt::read_pt_bytes) in strict and
// tolerant mode. The first input byte selects how the rest is used:
//   even: the rest is a whole .pt file (exercises the zip reader; pickle mutations mostly die on
//         the pickle's CRC there),
//   odd:  the rest is a data.pkl, wrapped here into a valid archive with storages data/0..data/3
//         of 256 bytes (exercises the unpickler and the tensor checks behind the CRC).
// A read that succeeds must also survive repr(), to_json() and, for strict reads, writing the value
// and reading it back. CheckpointError is a clean rejection; anything else aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "checkpoint/pt_file.h"
#include "checkpoint/value.h"
#include "core/error.h"
#include "core/logging.h"
#include <caffe2/serialize/inline_container.h>

namespace {

using zrt::ckpt::ReadMode;
using zrt::ckpt::ReadOptions;
using zrt::ckpt::Value;

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "fuzz_pt_reader: BUG: %s\n", what.c_str());
  std::abort();
}

std::string wrap_pickle(const std::string& pickle) {
  static const std::string storage = [] {
    std::string s(256, '\0');
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i % 2);  // valid bools too
    return s;
  }();
  std::string out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* p, size_t n) {
    out.append(static_cast<const char*>(p), n);
    return n;
  });
  w.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const char* key : {"data/0", "data/1", "data/2", "data/3"}) {
    w.writeRecord(key, storage.data(), storage.size());
  }
  w.writeEndOfFile();
  return out;
}

void exercise(const Value& v) {
  (void)v.repr(4000);
  try {
    (void)zrt::ckpt::to_json(v);
  } catch (const zrt::CheckpointError&) {
    // Tensors, objects, int keys and non-finite floats have no JSON form.
  }
}

void read(const std::string& bytes, ReadMode mode, bool only_module) {
  ReadOptions options;
  options.mode = mode;
  if (only_module) options.only_keys = {"module", "optimizer_state_dict"};
  Value v;
  try {
    v = zrt::ckpt::read_pt_bytes(bytes, "fuzz.pt", options);
  } catch (const zrt::InternalError& e) {
    bug(std::string("InternalError: ") + e.what());
  } catch (const zrt::CheckpointError&) {
    return;
  }
  exercise(v);
  if (mode != ReadMode::kStrict) return;
  // What the strict reader accepts, the writer must write and the reader read back.
  std::string again;
  try {
    again = zrt::ckpt::pt_bytes(v);
  } catch (const zrt::Error& e) {
    bug(std::string("a strictly read value cannot be written: ") + e.what());
  }
  try {
    zrt::ckpt::read_pt_bytes(again, "rewritten.pt", options);
  } catch (const zrt::Error& e) {
    bug(std::string("a rewritten value cannot be read: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zrt::set_log_level(zrt::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string bytes = (data[0] & 1) ? wrap_pickle(rest) : std::move(rest);
  read(bytes, ReadMode::kStrict, false);
  read(bytes, ReadMode::kTolerant, false);
  read(bytes, ReadMode::kTolerant, (data[0] & 2) != 0);
  return 0;
}
