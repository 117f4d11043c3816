// Hostile and broken .pt files: every outcome must be a clean CheckpointError naming the file (or
// a successful read), never a crash or an unbounded allocation. Random truncation and bit flips,
// then crafted pickles (lying lengths, bombs, recursion, bad targets, unknown globals) and crafted
// zip containers (lying sizes, traversal names, compression, overlaps).
#include <random>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/ds_objects.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/pt/zip_reader.h"
#include "core/error.h"
#include "tests/checkpoint/test_util.h"
#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>

namespace zrt::ckpt {
namespace {

using namespace std::string_literals;
using test::TempDir;

Value sample_value() {
  Value v = Value::ordered_dict();
  at::Tensor flat = torch::arange(64, torch::kFloat);
  v.set("a", flat.narrow(0, 0, 30));
  v.set("b", flat.narrow(0, 30, 34).view({2, 17}));
  v.set("h", torch::ones({3, 3}, torch::kHalf));
  v.set("flags", torch::tensor({true, false}));
  v.set("meta", Value::list({1, 2.5, "three", Value(), Value::tuple({int64_t{1} << 40})}));
  v.set("shape", Value::torch_size({2, 17}));
  Value d = Value::dict();
  d.set(0, Value::dict());
  d.at(0).set("step", 3);
  v.set("state", d);
  return v;
}

// Reads `bytes`; returns "" on success or the CheckpointError message. Any other exception
// fails the test.
std::string try_read(const std::string& bytes, ReadOptions options = {}) {
  try {
    read_pt_bytes(bytes, "bad.pt", options);
    return "";
  } catch (const CheckpointError& e) {
    return e.what();
  }
}

std::string archive(const std::string& pickle,
                    const std::vector<std::pair<std::string, std::string>>& records = {}) {
  std::string out;
  {
    caffe2::serialize::PyTorchStreamWriter w([&](const void* p, size_t n) {
      out.append(static_cast<const char*>(p), n);
      return n;
    });
    w.writeRecord("data.pkl", pickle.data(), pickle.size());
    for (const auto& [name, data] : records) w.writeRecord(name, data.data(), data.size());
    w.writeEndOfFile();
  }
  return out;
}

// A protocol-2 pickle around `body` (which must leave one object on the stack).
std::string pkl(const std::string& body) { return std::string("\x80\x02", 2) + body + "."; }

std::string u32le(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// A pickled tensor: _rebuild_tensor_v2(('storage', torch.FloatStorage, '0', 'cpu', numel),
// offset, (size,), (stride,), False, OrderedDict()); sizes are BININT (may be negative).
std::string tensor_pickle(int32_t numel, int32_t offset, int32_t size, int32_t stride,
                          const char* storage_class = "FloatStorage") {
  std::string s = "ctorch._utils\n_rebuild_tensor_v2\n(";
  s += "(X" + u32le(7) + "storage" + "ctorch\n" + storage_class + "\nX" + u32le(1) + "0" + "X" +
       u32le(3) + "cpu" + "J" + u32le(static_cast<uint32_t>(numel)) + "tQ";
  s += "J" + u32le(static_cast<uint32_t>(offset));
  s += "J" + u32le(static_cast<uint32_t>(size)) + "\x85";
  s += "J" + u32le(static_cast<uint32_t>(stride)) + "\x85";
  s += "\x89"
       "ccollections\nOrderedDict\n)R"
       "tR";
  return pkl(s);
}

std::string expect_error(const std::string& bytes, const std::string& needle,
                         ReadOptions options = {}) {
  const std::string msg = try_read(bytes, options);
  EXPECT_NE(msg, "") << "expected an error containing '" << needle << "'";
  EXPECT_NE(msg.find("bad.pt"), std::string::npos) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  return msg;
}

TEST(BadFiles, EveryTruncationIsACleanError) {
  const std::string good = pt_bytes(sample_value());
  ASSERT_EQ(try_read(good), "");
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string msg = try_read(good.substr(0, n));
    ASSERT_NE(msg, "") << "prefix of " << n << " bytes read successfully";
    ASSERT_NE(msg.find("bad.pt"), std::string::npos) << msg;
  }
}

TEST(BadFiles, RandomCorruptionNeverCrashes) {
  const std::string good = pt_bytes(sample_value());
  std::mt19937_64 rng(1234);
  int errors = 0, reads = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t pos = rng() % bad.size();
      if (rng() % 2) {
        bad[pos] = static_cast<char>(bad[pos] ^ (1 << (rng() % 8)));
      } else {
        bad[pos] = static_cast<char>(rng());
      }
    }
    if (rng() % 8 == 0) bad.resize(rng() % bad.size());
    ReadOptions opts;
    opts.verify_crc = rng() % 2;
    opts.mode = rng() % 2 ? ReadMode::kStrict : ReadMode::kTolerant;
    const std::string msg = try_read(bad, opts);
    (msg.empty() ? reads : errors)++;
    if (!msg.empty()) ASSERT_NE(msg.find("bad.pt"), std::string::npos) << msg;
  }
  EXPECT_GT(errors, 5000);
  RecordProperty("successful_reads", reads);
}

// The pickle's CRC is always checked, so random flips rarely reach the unpickler; this loop
// corrupts the pickle itself and rebuilds a consistent archive around it.
TEST(BadFiles, RandomPickleCorruptionNeverCrashes) {
  const std::string good = pt_bytes(sample_value());
  MemorySource src(good, "good.pt");
  ZipReader zip(src, 100);
  std::string pickle;
  std::vector<std::pair<std::string, std::string>> records;
  for (const ZipEntry& e : zip.entries()) {
    const std::string name = e.name.substr(std::string("archive/").size());
    if (name == "data.pkl") {
      pickle = zip.read_string(e, 1 << 20, true);
    } else if (name.rfind("data/", 0) == 0) {
      records.emplace_back(name, zip.read_string(e, 1 << 20, true));
    }
  }
  ASSERT_FALSE(pickle.empty());
  std::mt19937_64 rng(99);
  int errors = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bad = pickle;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const size_t pos = rng() % bad.size();
      switch (rng() % 4) {
        case 0:
          bad[pos] = static_cast<char>(bad[pos] ^ (1 << (rng() % 8)));
          break;
        case 1:
          bad[pos] = static_cast<char>(rng());
          break;
        case 2:
          bad.erase(pos, 1 + rng() % 4);
          break;
        default:
          bad.insert(pos, 1, static_cast<char>(rng()));
          break;
      }
      if (bad.empty()) bad = "x";
    }
    ReadOptions opts;
    opts.mode = rng() % 2 ? ReadMode::kStrict : ReadMode::kTolerant;
    const std::string msg = try_read(archive(bad, records), opts);
    if (!msg.empty()) {
      ++errors;
      ASSERT_NE(msg.find("bad.pt"), std::string::npos) << msg;
    }
  }
  EXPECT_GT(errors, 10000);
}

TEST(BadFiles, CrcCatchesFlippedTensorBytes) {
  std::string bytes = pt_bytes(Value::list({torch::zeros({1000})}));
  const size_t pos = bytes.find(std::string(64, '\0'), bytes.find("archive/data/0") + 20);
  ASSERT_NE(pos, std::string::npos);
  bytes[pos + 100] = 1;
  expect_error(bytes, "fails its CRC-32 check");
  ReadOptions no_crc;
  no_crc.verify_crc = false;
  EXPECT_EQ(try_read(bytes, no_crc), "");
}

TEST(BadFiles, LyingLengthsInThePickle) {
  // A string claiming ~4 GB in a tiny file (pytorch #185443): refused before allocating.
  expect_error(archive(pkl("X" + u32le(0xFFFFFFF0u) + "abc")), "needs 4294967280 more bytes");
  expect_error(archive(pkl(std::string("\x8d", 1) + u32le(4194304000u) + u32le(0) + "abc")),
               "needs 4194304000 more bytes");
  expect_error(archive(pkl(std::string("\x8b", 1) + u32le(0x80000000u))), "negative length");
  expect_error(archive(pkl("\x8a\x09" + std::string(8, '\x01') + "\x01")), "does not fit in int64");
  expect_error(archive(pkl("h\x05")), "memo index 5 is not defined");
  expect_error(archive(pkl("X" + u32le(2) + "\xff\xfe")), "not valid UTF-8");
  expect_error(archive(std::string("\x80\x02N", 3)), "needs 1 more bytes");
  expect_error(archive(pkl("NN")), "STOP with a malformed stack");
  expect_error(archive(pkl("a")), "stack underflow");
  expect_error(archive(pkl("\x80\x07N")), "pickle protocol 7");
  expect_error(archive(pkl("I1\n")), "unsupported pickle opcode 0x49");
}

TEST(BadFiles, ResourceBombsHitTheirLimits) {
  // Stack: DUP a million times.
  ReadOptions small;
  small.max_stack = 1000;
  expect_error(archive(pkl("N" + std::string(5000, '2'))), "stack exceeds the limit of 1000",
               small);
  // Billion laughs: each level is a list holding the previous level twice.
  std::string laughs =
      "]q\x00"
      "0"s;
  for (int level = 1; level < 40; ++level) {
    const char prev = static_cast<char>(level - 1);
    laughs += "(h"s + prev + "h" + prev + "lq" + static_cast<char>(level) + "0";
  }
  laughs += "h"s + static_cast<char>(39);
  ReadOptions capped;
  capped.max_values = 100000;
  expect_error(archive(pkl(laughs)), "expands to more than 100000", capped);
  // Nesting.
  std::string deep(600, ']');
  deep += std::string(599, 'a');
  expect_error(archive(pkl(deep)), "nest deeper than 512");
  // Marks.
  expect_error(archive(pkl(std::string(5000, '('))), "nested MARKs");
  // Objects.
  ReadOptions few;
  few.max_nodes = 100;
  expect_error(archive(pkl("(" + std::string(200, 'N') + "l")), "more than the limit of 100", few);
  // A pickle bigger than allowed is refused before it is read.
  ReadOptions tiny;
  tiny.max_pickle_bytes = 10;
  expect_error(archive(pkl("(" + std::string(20, 'N') + "l")), "more than the limit of 10", tiny);
}

TEST(BadFiles, StructuralAbuseIsRefused) {
  expect_error(archive(pkl(std::string("]q\0h\0a", 6))), "contains itself");
  expect_error(archive(pkl("]NNs")), "SETITEM on a list");
  expect_error(archive(pkl("}Na")), "APPEND to a dict");
  expect_error(archive(pkl("}Nu")), "no MARK to pop to");
  expect_error(archive(pkl("}(NNNu")), "odd number");
  expect_error(archive(pkl("}(]Nu")), "dict key of type list");
  expect_error(archive(pkl("}Nb")), "BUILD on a dict");
  expect_error(archive(pkl("ctorch\nSize\nX" + u32le(1) + "a\x85\x85R")), "not an int");
  expect_error(archive(pkl("ctorch\nSize\nN\x85R")), "must be a tuple of ints");
  expect_error(archive(pkl("ccollections\nOrderedDict\nN\x85R")), "unexpected arguments");
}

TEST(BadFiles, UnknownGlobalsAreNamedAndNeverCalled) {
  TempDir dir;
  const std::string marker = dir / "pwned";
  const std::string cmd = "touch " + marker;
  const std::string evil =
      archive(pkl("cposix\nsystem\nX" + u32le(static_cast<uint32_t>(cmd.size())) + cmd + "\x85R"));
  expect_error(evil, "unsupported Python global 'posix.system'");
  ReadOptions tolerant;
  tolerant.mode = ReadMode::kTolerant;
  Value v = read_pt_bytes(evil, "bad.pt", tolerant);
  EXPECT_EQ(v.as_object().type, "posix.system");
  EXPECT_EQ(v.as_object().args[0].as_string(), cmd);
  EXPECT_FALSE(std::filesystem::exists(marker));
  expect_error(archive(pkl("cbuiltins\neval\n")), "'builtins.eval'");
  expect_error(archive(pkl("c__builtin__\nset\n")), "'builtins.set'");
  expect_error(archive(pkl("ctorch\ndevice\n")), "'torch.device'");
  expect_error(archive(pkl("cos\nsys tem\n")), "outside [A-Za-z0-9_.]");
}

// Strict mode knows DeepSpeed's two loss scalers only as plain data: NEWOBJ with no arguments,
// a dict of attributes as BUILD state, nothing added to them; torch dtypes only as values.
TEST(BadFiles, LossScalersAreDataOnly) {
  const std::string cls = "cdeepspeed.runtime.fp16.loss_scaler\nLossScaler\n";
  const std::string attrs = "}X" + u32le(9) + "cur_scale" + "K\x02" + "s";
  Value v = read_pt_bytes(archive(pkl(cls + ")\x81" + attrs + "b")), "bad.pt");
  EXPECT_EQ(v.as_object().type, "deepspeed.runtime.fp16.loss_scaler.LossScaler");
  EXPECT_EQ(v.as_object().state.at("cur_scale").as_int(), 2);
  EXPECT_EQ(read_pt_bytes(archive(pkl("ctorch\nfloat16\n")), "bad.pt").as_object().type,
            "torch.float16");
  expect_error(archive(pkl(cls + "K\x01\x85\x81")), "LossScaler made with arguments");
  expect_error(archive(pkl(cls + ")R")), "cannot call deepspeed.runtime.fp16.loss_scaler");
  expect_error(archive(pkl(cls + ")\x81N" + "b")), "is a None, not a dict of its attributes");
  expect_error(archive(pkl(cls + ")\x81" + "K\x01K\x02s")), "SETITEM on a object");
  expect_error(archive(pkl(cls + ")\x81" + "K\x01" + "a")), "APPEND to a object");
  expect_error(archive(pkl(cls)), "a bare reference to deepspeed.runtime.fp16.loss_scaler");
  expect_error(archive(pkl("ctorch\nFloatStorage\n")), "a bare reference to torch.FloatStorage");
  expect_error(archive(pkl("cdeepspeed.runtime.zero.config\nZeroStageEnum\n)\x81")),
               "'deepspeed.runtime.zero.config.ZeroStageEnum'");
  expect_error(archive(pkl("ctorch\nfloat16\n)\x81")), "cannot instantiate a torch.float16");
  expect_error(archive(pkl(cls + ")}\x92")), "NEWOBJ_EX is not supported");
  const std::string frag = "cdeepspeed.utils.tensor_fragment\nfragment_address\n";
  const Value f = read_pt_bytes(
      archive(pkl(frag + ")\x81}(X" + u32le(5) + "numel" + "K\x05X" + u32le(5) + "start" +
                  "K\x02ub")),
      "bad.pt");
  EXPECT_EQ(ds_fragment_address(f, "bad.pt"), (std::pair<int64_t, int64_t>{5, 2}));
  expect_error(archive(pkl(frag + "K\x01\x85\x81")), "fragment_address made with arguments");
}

TEST(BadFiles, ExtraRecordsOfNewerTorchAndByteOrder) {
  const std::string ten_floats(40, '\0');
  // torch >= 2.1 adds these records; they are fine.
  EXPECT_EQ(try_read(archive(tensor_pickle(10, 0, 10, 1), {{"data/0", ten_floats},
                                                           {"byteorder", "little"},
                                                           {".data/version", "3\n"},
                                                           {".data/serialization_id", "1234"}})),
            "");
  expect_error(archive(tensor_pickle(10, 0, 10, 1), {{"data/0", ten_floats}, {"byteorder", "big"}}),
               "byte order 'big' is not supported");
  expect_error(archive(pkl("N"), {{"version", "3x"}}), "malformed version record");
}

TEST(BadFiles, TensorsThatLieAboutTheirStorage) {
  const std::string ten_floats(40, '\0');
  // Fine: 10 floats, a view of 5 from offset 5.
  EXPECT_EQ(try_read(archive(tensor_pickle(10, 5, 5, 1), {{"data/0", ten_floats}})), "");
  expect_error(archive(tensor_pickle(10, 8, 5, 1), {{"data/0", ten_floats}}),
               "reaches element 13 of storage '0' which has only 10");
  expect_error(archive(tensor_pickle(10, 0, 4, 4), {{"data/0", ten_floats}}), "reaches element 13");
  expect_error(archive(tensor_pickle(10, 0, -1, 1), {{"data/0", ten_floats}}), "not an int >= 0");
  expect_error(archive(tensor_pickle(10, 0, 2, -1), {{"data/0", ten_floats}}), "not an int >= 0");
  expect_error(archive(tensor_pickle(10, -3, 2, 1), {{"data/0", ten_floats}}), "offset");
  // The storage declares more (or fewer) bytes than its record holds.
  expect_error(archive(tensor_pickle(11, 0, 2, 1), {{"data/0", ten_floats}}),
               "has 40 bytes but the pickle declares 11 Float elements (44 bytes)");
  expect_error(archive(tensor_pickle(10, 0, 2, 1), {}),
               "storage record 'archive/data/0' is missing");
  expect_error(archive(tensor_pickle(0x7FFFFFFF, 0, 2, 1), {{"data/0", ten_floats}}),
               "declares 2147483647");
  expect_error(archive(tensor_pickle(10, 0, 2, 1, "ComplexFloatStorage"), {{"data/0", ten_floats}}),
               "ComplexFloatStorage");
  std::string bools(10, '\0');
  bools[3] = 7;
  expect_error(archive(tensor_pickle(10, 0, 2, 1, "BoolStorage"), {{"data/0", bools}}),
               "holds the byte 7 at element 3");
}

// ---- crafted zip containers ----

uint32_t get_u32(const std::string& s, size_t p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[p + i]);
  return v;
}
void put_u32(std::string& s, size_t p, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[p + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put_u16(std::string& s, size_t p, uint16_t v) {
  s[p] = static_cast<char>(v & 0xFF);
  s[p + 1] = static_cast<char>(v >> 8);
}
// Offset of the central-directory header of entry `name`.
size_t central_entry(const std::string& zip, const std::string& name) {
  size_t pos = 0;
  while ((pos = zip.find("PK\x01\x02", pos)) != std::string::npos) {
    const size_t len =
        static_cast<uint8_t>(zip[pos + 28]) | (static_cast<uint8_t>(zip[pos + 29]) << 8);
    if (zip.compare(pos + 46, len, name) == 0) return pos;
    ++pos;
  }
  ADD_FAILURE() << "no central entry " << name;
  return 0;
}

TEST(BadFiles, ZipContainersThatLie) {
  const std::string good = pt_bytes(Value::list({torch::arange(100, torch::kFloat)}));
  ASSERT_EQ(try_read(good), "");
  const size_t cd = central_entry(good, "archive/data/0");
  {
    std::string bad = good;  // sizes larger than the data that follows
    put_u32(bad, cd + 20, 1u << 30);
    put_u32(bad, cd + 24, 1u << 30);
    expect_error(bad, "runs past the central directory");
  }
  {
    std::string bad = good;  // compressed size != size
    put_u32(bad, cd + 20, 12);
    expect_error(bad, "compressed size 12 != size 400");
  }
  {
    std::string bad = good;  // deflated
    put_u16(bad, cd + 10, 8);
    expect_error(bad, "is compressed (method 8)");
  }
  {
    std::string bad = good;  // encrypted
    put_u16(bad, cd + 8, 1);
    expect_error(bad, "is encrypted");
  }
  {
    std::string bad = good;  // local header offset points elsewhere
    put_u32(bad, cd + 42, get_u32(bad, cd + 42) + 7);
    expect_error(bad, "bad local header signature");
  }
  {
    std::string bad = good;  // shrunk record: the pickle then declares more than the record holds
    put_u32(bad, cd + 20, 396);
    put_u32(bad, cd + 24, 396);
    expect_error(bad, "has 396 bytes but the pickle declares 100 Float elements");
  }
  {
    std::string bad = good;  // a second entry's data overlapping the first
    const size_t pk = central_entry(bad, "archive/data.pkl");
    const size_t d0 = central_entry(bad, "archive/data/0");
    put_u32(bad, pk + 20, get_u32(bad, d0 + 42) + 200 - get_u32(bad, pk + 42));
    put_u32(bad, pk + 24, get_u32(bad, pk + 20));
    expect_error(bad, "overlap");
  }
  {
    // PyTorch's writer always adds zip64 records; the reader uses them when the classic end
    // record says "see zip64" (0xFFFF entries / 0xFFFFFFFF offsets).
    std::string forced = good;
    const size_t end = forced.rfind("PK\x05\x06");
    put_u16(forced, end + 8, 0xFFFF);
    put_u16(forced, end + 10, 0xFFFF);
    put_u32(forced, end + 12, 0xFFFFFFFFu);
    put_u32(forced, end + 16, 0xFFFFFFFFu);
    EXPECT_EQ(try_read(forced), "");
    std::string bad = forced;
    const size_t e64 = bad.rfind("PK\x06\x06");
    const uint32_t entries = get_u32(bad, e64 + 24);  // 5 with LibTorch 2.x, 3 with 1.13
    put_u32(bad, e64 + 32, 0);
    put_u32(bad, e64 + 36, 0x100);
    expect_error(bad, "counts " + std::to_string(entries) +
                          " entries on this disk but 1099511627776 in all");
    put_u32(bad, e64 + 24, 0);
    put_u32(bad, e64 + 28, 0x100);
    expect_error(bad, "declares 1099511627776 entries");
    bad = forced;
    const size_t loc = bad.rfind("PK\x06\x07");
    put_u32(bad, loc + 8, static_cast<uint32_t>(bad.size()));
    expect_error(bad, "zip64 end record offset");
    bad = forced;
    put_u32(bad, bad.rfind("PK\x06\x07"), 0);
    expect_error(bad, "without a zip64 locator");
  }
  {
    // The classic end record and torch's zip64 records must agree (miniz refuses either lie).
    std::string bad = good;  // central directory offset out of range
    const size_t end = bad.rfind("PK\x05\x06");
    put_u32(bad, end + 16, static_cast<uint32_t>(bad.size()));
    expect_error(bad, "the zip end record and the zip64 end record disagree");
    bad = good;
    const uint32_t entries = get_u32(bad, end + 8) & 0xFFFF;
    put_u16(bad, end + 8, static_cast<uint16_t>(entries - 1));
    expect_error(bad, "the end record counts " + std::to_string(entries - 1) +
                          " entries on this disk but " + std::to_string(entries) + " in all");
    bad = good;
    const size_t e64 = bad.rfind("PK\x06\x06");
    put_u32(bad, e64 + 16, 1);
    expect_error(bad, "multi-disk");
    bad = good;
    put_u32(bad, e64 + 40, get_u32(bad, e64 + 40) - 46);  // directory shorter than its entries
    expect_error(bad, "disagree");
  }
  {
    std::string bad = good;  // an entry on another disk, an entry that is a directory
    const size_t d0 = central_entry(bad, "archive/data/0");
    put_u16(bad, d0 + 34, 1);
    expect_error(bad, "starts on disk 1");
    bad = good;
    put_u32(bad, d0 + 38, 0x10);
    expect_error(bad, "is marked as a directory");
  }
  for (const char* evil : {"../data/0", "/abs/data", "archive/../x", "archive//x", "a\\b/c"}) {
    std::string bad = good;
    const size_t pk = central_entry(bad, "archive/data/0");
    std::string name = evil;
    name.resize(14, 'x');  // same length as "archive/data/0"
    bad.replace(pk + 46, 14, name);
    const std::string msg = try_read(bad);
    EXPECT_TRUE(msg.find("component") != std::string::npos ||
                msg.find("absolute") != std::string::npos ||
                msg.find("backslash") != std::string::npos)
        << evil << ": " << msg;
  }
  expect_error(std::string(10, 'x'), "too small");
  expect_error(std::string(100, 'x'), "no zip end-of-central-directory record");
}

TEST(BadFiles, NonRegularFilesAreRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir / "fifo.pt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    load_pt(fifo);
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_pt(dir.path()), CheckpointError);
  EXPECT_THROW(load_pt(dir / "missing.pt"), CheckpointError);
}

}  // namespace
}  // namespace zrt::ckpt
