// libFuzzer target: the .pt reader in strict and tolerant mode. The first input byte selects how
// the rest is used:
//   even: the rest is a whole .pt file for ckpt::read_pt_bytes (exercises the zip reader; pickle
//         mutations mostly die on the pickle's CRC there),
//   odd:  the rest is a bare data.pkl for ckpt::unpickle, whose storages come from a loader that
//         makes any declared storage of up to 2^20 elements (exercises the unpickler, the graph
//         expansion and the tensor view checks behind the CRC).
// A read that succeeds must also survive repr(), to_json() and, for strict reads, writing the value
// with write_pt and reading it back. CheckpointError is a clean rejection; anything else aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>

#include "checkpoint/pt/pt_file.h"
#include "checkpoint/pt/unpickler.h"
#include "checkpoint/value.h"
#include "core/error.h"
#include "core/logging.h"

namespace {

using zrt::ckpt::ReadMode;
using zrt::ckpt::ReadOptions;
using zrt::ckpt::Value;

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "fuzz_pt_reader: BUG: %s\n", what.c_str());
  std::abort();
}

// Storages for bare pickles: zeros of whatever the pickle declares, within a bound.
at::Tensor fake_storage(const std::string& key, at::ScalarType dtype, int64_t numel) {
  if (numel > (int64_t{1} << 20)) {
    throw zrt::CheckpointError("fuzz: storage '" + key + "' is larger than the harness allows");
  }
  return at::zeros({numel}, at::TensorOptions().dtype(dtype));
}

void exercise(const Value& v) {
  (void)v.repr(4000);
  try {
    (void)zrt::ckpt::to_json(v);
  } catch (const zrt::CheckpointError&) {
    // Tensors, objects, int keys and non-finite floats have no JSON form.
  }
}

void read(const std::string& bytes, bool bare_pickle, ReadMode mode, bool only_module) {
  ReadOptions options;
  options.mode = mode;
  if (only_module) options.only_keys = {"module", "optimizer_state_dict"};
  Value v;
  try {
    v = bare_pickle ? zrt::ckpt::unpickle(bytes, fake_storage, options, "fuzz.pkl")
                    : zrt::ckpt::read_pt_bytes(bytes, "fuzz.pt", options);
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
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool bare = (data[0] & 1) != 0;
  read(bytes, bare, ReadMode::kStrict, false);
  read(bytes, bare, ReadMode::kTolerant, false);
  read(bytes, bare, ReadMode::kTolerant, (data[0] & 2) != 0);
  return 0;
}
