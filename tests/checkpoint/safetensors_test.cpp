// safetensors: round trips, a Python cross-check (an independent reader and writer built from
// json + struct + torch, since python3-safetensors is not installed), and every header check.
#include "checkpoint/safetensors.h"

#include <random>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "tests/checkpoint/test_util.h"

namespace zrt::ckpt {
namespace {

using test::TempDir;

std::string to_bytes(const NamedTensors& tensors, const StringPairs& meta = {}) {
  StringSink sink;
  write_safetensors(tensors, sink, meta);
  return sink.take();
}

std::string try_read(const std::string& bytes) {
  try {
    MemorySource src(bytes, "bad.safetensors");
    read_safetensors(src);
    return "";
  } catch (const CheckpointError& e) {
    return e.what();
  }
}

// A file with the given header text and `data_bytes` zero bytes of data.
std::string with_header(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + std::string(data_bytes, '\0');
}

void expect_error(const std::string& bytes, const std::string& needle) {
  const std::string msg = try_read(bytes);
  EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
}

TEST(Safetensors, RoundTrip) {
  NamedTensors tensors;
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt,
                     at::kShort, at::kChar, at::kByte, at::kBool}) {
    tensors.emplace_back(c10::toString(dtype), (torch::arange(12) % 5).reshape({3, 4}).to(dtype));
  }
  tensors.emplace_back("transposed", torch::arange(6, torch::kFloat).reshape({2, 3}).t());
  tensors.emplace_back("empty", torch::zeros({0, 3}));
  tensors.emplace_back("scalar", torch::tensor(2.5));
  const StringPairs meta = {{"format", "pt"}, {"source", "zrt"}};
  const std::string bytes = to_bytes(tensors, meta);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ((8 + header_len) % 8, 0u);  // data aligned to 8 bytes
  MemorySource src(bytes, "x.safetensors");
  SafetensorsFile back = read_safetensors(src);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first);
    EXPECT_EQ(back.tensors[i].second.scalar_type(), tensors[i].second.scalar_type());
    EXPECT_TRUE(back.tensors[i].second.equal(tensors[i].second)) << tensors[i].first;
  }
  EXPECT_EQ(back.metadata, meta);
  TempDir dir;
  save_safetensors(tensors, dir / "m.safetensors", meta);
  EXPECT_EQ(load_safetensors(dir / "m.safetensors").tensors.size(), tensors.size());
}

TEST(Safetensors, WriterRefusesBadInput) {
  EXPECT_THROW(to_bytes({{"", torch::zeros({1})}}), CheckpointError);
  EXPECT_THROW(to_bytes({{"__metadata__", torch::zeros({1})}}), CheckpointError);
  EXPECT_THROW(to_bytes({{"a", torch::zeros({1})}, {"a", torch::zeros({1})}}), CheckpointError);
  EXPECT_THROW(to_bytes({{"c", torch::zeros({1}, torch::kComplexFloat)}}), CheckpointError);
  EXPECT_THROW(to_bytes({{"bad\xff", torch::zeros({1})}}), CheckpointError);
}

constexpr const char* kPythonSafetensors = R"PY(
import sys, json, struct, torch
path, out = sys.argv[1], sys.argv[2]
DT = {'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16, 'I64': torch.int64,
      'BOOL': torch.bool}
raw = open(path, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
assert header['__metadata__'] == {'format': 'pt'}
got = {}
for name, info in header.items():
    if name == '__metadata__':
        continue
    b, e = info['data_offsets']
    t = torch.frombuffer(bytearray(data[b:e]), dtype=DT[info['dtype']]) if e > b else \
        torch.empty(0, dtype=DT[info['dtype']])
    got[name] = t.reshape(info['shape'])
assert torch.equal(got['w'], torch.arange(12.).reshape(3, 4)), got['w']
assert torch.equal(got['h'], torch.arange(5).half())
assert torch.equal(got['b'], torch.arange(7).bfloat16())
assert got['i'].tolist() == [-1, 2**40]
assert got['f'].tolist() == [True, False]
# And a file written here, read by the C++ side.
tensors = {'z': torch.arange(6, dtype=torch.int64).reshape(2, 3) - 2, 'a': torch.ones(4, dtype=torch.bfloat16)}
header, blobs, off = {'__metadata__': {'by': 'python'}}, [], 0
for name, t in tensors.items():
    b = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16 else \
        t.view(torch.int16).numpy().tobytes()
    header[name] = {'dtype': {torch.int64: 'I64', torch.bfloat16: 'BF16'}[t.dtype],
                    'shape': list(t.shape), 'data_offsets': [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
open(out, 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
print('OK')
)PY";

TEST(Safetensors, PythonInterop) {
  ZRT_REQUIRE_PYTHON_TORCH();
  TempDir dir;
  save_safetensors({{"w", torch::arange(12, torch::kFloat).reshape({3, 4})},
                    {"h", torch::arange(5).to(torch::kHalf)},
                    {"b", torch::arange(7).to(torch::kBFloat16)},
                    {"i", torch::tensor({int64_t{-1}, int64_t{1} << 40})},
                    {"f", torch::tensor({true, false})}},
                   dir / "ours.safetensors", {{"format", "pt"}});
  const auto r = test::run_python(kPythonSafetensors,
                                  dir / "ours.safetensors" + " " + dir / "theirs.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsFile f = load_safetensors(dir / "theirs.safetensors");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "z");
  EXPECT_TRUE(f.tensors[0].second.equal(torch::arange(6).reshape({2, 3}) - 2));
  EXPECT_TRUE(f.tensors[1].second.equal(torch::ones({4}, torch::kBFloat16)));
  EXPECT_EQ(f.metadata, (StringPairs{{"by", "python"}}));
}

TEST(Safetensors, HeaderChecks) {
  const std::string ok =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],)"
      R"("data_offsets":[8,11]}})";
  EXPECT_EQ(try_read(with_header(ok, 11)), "");
  expect_error("short", "too small");
  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32 bytes of header
  expect_error(huge + "{}", "exceeds the limit of 100000000");
  expect_error(with_header("{}", 0).substr(0, 9), "runs past the end");
  expect_error(with_header("[1]", 0), "does not start with '{'");
  expect_error(with_header("{\"a\":", 0), "not valid JSON");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           8),
               "repeats the key 'a'");
  expect_error(with_header(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1),
               "unsupported dtype");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
               "non-negative");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
               "non-negative");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4),
               "outside");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,400]}})", 4),
               "outside the 4 data bytes");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
               "give 8 bytes but data_offsets span 4");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
               "starts at byte 4 but the previous data end at 0");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           8),
               "gap or overlap");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12),
               "cover 4 bytes but the file holds 12");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[[[[1]]]],"data_offsets":[0,4]}})", 4),
               "deeper than 4");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
               "expected exactly");
  expect_error(with_header(R"({"__metadata__":{"k":1}})", 0), "is not a string");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],)"
                           R"("data_offsets":[0,4]}})",
                           4),
               "too large");
  std::string bools = with_header(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", 2);
  bools.back() = 2;
  expect_error(bools, "holds the byte 2");
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  const std::string good = to_bytes(
      {{"w", torch::randn({4, 4})}, {"b", torch::ones({3}, torch::kBFloat16)}}, {{"k", "v"}});
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bad = good;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      bad[rng() % bad.size()] = static_cast<char>(rng());
    }
    if (rng() % 6 == 0) bad.resize(rng() % bad.size());
    const std::string msg = try_read(bad);
    if (!msg.empty()) ASSERT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace zrt::ckpt
