// Round trips through our pickler and unpickler (in memory) for every value kind, shared
// storages, and what the writer refuses.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/ds_objects.h"
#include "checkpoint/hash.h"
#include "checkpoint/io.h"
#include "checkpoint/pt/pickler.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/pt/zip_reader.h"
#include "core/error.h"
#include "tests/checkpoint/test_util.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"

namespace zrt::ckpt {
namespace {

Value round_trip(const Value& v, const ReadOptions& options = {}) {
  return read_pt_bytes(pt_bytes(v), "mem.pt", options);
}

const auto error_of = &zrt::test::error_of<CheckpointError>;

uint32_t le(const std::string& b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

// Note [Zip CRCs filled in here] (checkpoint/pt/pt_writer.cpp): every record's CRC-32, in its data
// descriptor and in the central directory, is the CRC of its bytes, whoever computed it; the
// records of the zip writer's own (version, serialization id) included. The local headers are
// torch.save's: bit 3 set, CRC and sizes 0 (an empty record: no bit 3, no descriptor).
TEST(PtWriter, EveryLocalAndCentralCrcIsTheRecordsCrc) {
  Value v = Value::ordered_dict();
  v.set("big", torch::arange(3 << 18, torch::kFloat));  // 3 MiB
  v.set("small", torch::arange(7, torch::kShort));
  v.set("empty", torch::zeros({0}));
  v.set("nested", Value::list({torch::ones({3, 5}, torch::kBFloat16), 2.5, "x"}));
  const std::string bytes = pt_bytes(v);
  MemorySource source(bytes, "mem.pt");
  ZipReader zip(source, 100);
  ASSERT_GE(zip.entries().size(), 6u);
  size_t at = 0, records = 0;
  while (le(bytes, at, 4) == 0x04034b50) {
    const size_t name_len = le(bytes, at + 26, 2), extra_len = le(bytes, at + 28, 2);
    const std::string name = bytes.substr(at + 30, name_len);
    const ZipEntry* entry = zip.find(name);
    ASSERT_NE(entry, nullptr) << name;
    const size_t data = at + 30 + name_len + extra_len;
    ASSERT_EQ(data, entry->data_offset) << name;
    const uint32_t crc = crc32(bytes.data() + data, entry->size);
    EXPECT_EQ(le(bytes, at + 14, 4), 0u) << "local header of " << name;
    EXPECT_EQ(entry->crc32, crc) << "central directory entry of " << name;
    ++records;
    if ((le(bytes, at + 6, 2) & 8) == 0) {  // an empty record has no descriptor
      EXPECT_EQ(entry->size, 0u) << name;
      at = data;
      continue;
    }
    const size_t descriptor = data + entry->size;
    ASSERT_EQ(le(bytes, descriptor, 4), 0x08074b50u) << "data descriptor of " << name;
    EXPECT_EQ(le(bytes, descriptor + 4, 4), crc) << "data descriptor of " << name;
    EXPECT_EQ(le(bytes, descriptor + 8, 4), entry->size) << "data descriptor of " << name;
    at = descriptor + 16;
  }
  EXPECT_EQ(records, zip.entries().size());
  EXPECT_EQ(le(bytes, at, 4), 0x02014b50u) << "the central directory follows the records";
  // And the reader's own verification agrees.
  for (const ZipEntry& e : zip.entries()) {
    std::string out(e.size, '\0');
    EXPECT_NO_THROW(zip.read(e, out.data(), /*verify_crc=*/true)) << e.name;
  }
}

TEST(Pickle, ScalarsRoundTrip) {
  const int64_t ints[] = {0,
                          1,
                          255,
                          256,
                          65535,
                          65536,
                          -1,
                          -255,
                          -256,
                          INT32_MIN,
                          INT32_MAX,
                          int64_t{INT32_MAX} + 1,
                          int64_t{INT32_MIN} - 1,
                          int64_t{1} << 40,
                          -(int64_t{1} << 40),
                          std::numeric_limits<int64_t>::max(),
                          std::numeric_limits<int64_t>::min(),
                          127,
                          128,
                          -128,
                          -129};
  for (int64_t i : ints) {
    Value back = round_trip(Value(i));
    ASSERT_TRUE(back.is_int()) << i;
    EXPECT_EQ(back.as_int(), i);
  }
  for (double d : {0.0, -0.0, 1.5, -2.25e300, 1e-310, std::numeric_limits<double>::infinity()}) {
    Value back = round_trip(Value(d));
    ASSERT_TRUE(back.is_double());
    EXPECT_EQ(std::signbit(back.as_double()), std::signbit(d));
    EXPECT_EQ(back.as_double(), d);
  }
  EXPECT_TRUE(std::isnan(round_trip(Value(std::nan(""))).as_double()));
  EXPECT_TRUE(round_trip(Value()).is_none());
  EXPECT_EQ(round_trip(Value(true)).as_bool(), true);
  EXPECT_EQ(round_trip(Value(false)).as_bool(), false);
  for (const char* s : {"", "a", "h\xc3\xa9llo \xe2\x82\xac", "with\nnewline"}) {
    EXPECT_EQ(round_trip(Value(s)).as_string(), s);
  }
  EXPECT_EQ(round_trip(Value(std::string(100000, 'x'))).as_string().size(), 100000u);
}

TEST(Pickle, ContainersRoundTrip) {
  Value root = Value::dict();
  for (size_t n : {0, 1, 2, 3, 4, 999, 1000, 1001, 2500}) {
    std::vector<Value> items;
    for (size_t i = 0; i < n; ++i) items.emplace_back(static_cast<int64_t>(i));
    root.set("list" + std::to_string(n), Value::list(items));
    root.set("tuple" + std::to_string(n), Value::tuple(items));
    Value d = n % 2 ? Value::ordered_dict() : Value::dict();
    for (size_t i = 0; i < n; ++i) {
      if (i % 3 == 0) {
        d.set(static_cast<int64_t>(i), Value::list({"x"}));
      } else {
        d.set("k" + std::to_string(i), 0.5 * static_cast<double>(i));
      }
    }
    root.set("dict" + std::to_string(n), d);
  }
  root.set("size0", Value::torch_size({}));
  root.set("size", Value::torch_size({2, 0, 7}));
  root.set("nested", Value::list({Value::tuple({Value::list({Value::dict()})}), Value()}));
  // More than 256 distinct strings: memo indices past 255 use LONG_BINPUT / LONG_BINGET.
  Value many = Value::list();
  for (int i = 0; i < 600; ++i) many.push_back("s" + std::to_string(i % 300));
  root.set("many", many);
  Value back = round_trip(root);
  EXPECT_TRUE(back.equals(root)) << back.repr(500);
  EXPECT_TRUE(back.at("dict1").is_ordered_dict());
  EXPECT_FALSE(back.at("dict2").is_ordered_dict());
}

TEST(Pickle, TensorsOfEveryDtypeRoundTrip) {
  Value root = Value::ordered_dict();
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt,
                     at::kShort, at::kChar, at::kByte, at::kBool}) {
    at::Tensor t = (torch::arange(24) % 7).reshape({2, 3, 4}).to(dtype);
    root.set(c10::toString(dtype), t);
  }
  root.set("scalar", torch::tensor(3.5));
  root.set("empty", torch::zeros({0, 5}));
  at::Tensor base = torch::randn({6, 5});
  root.set("transposed", base.t());
  root.set("strided", base.slice(1, 1, 5, 2));
  root.set("expanded", torch::arange(3.0).expand({4, 3}));
  Value back = round_trip(root);
  ASSERT_TRUE(back.equals(root));
  EXPECT_EQ(back.at("transposed").as_tensor().strides(), base.t().strides());
  EXPECT_EQ(back.at("expanded").as_tensor().strides(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(back.at("Half").as_tensor().scalar_type(), at::kHalf);
}

TEST(Pickle, ViewsOfOneBufferShareOneStorage) {
  at::Tensor flat = torch::arange(100, torch::kFloat);
  Value parts =
      Value::list({flat.narrow(0, 0, 40), flat.narrow(0, 40, 35), flat.narrow(0, 75, 25)});
  Value root = Value::dict();
  root.set("parts", parts);
  root.set("again", flat);
  PickleResult p = pickle_value(root);
  ASSERT_EQ(p.storages.size(), 1u);
  EXPECT_EQ(p.storages[0].numel, 100);
  std::string bytes = pt_bytes(root);
  EXPECT_LT(bytes.size(), 100 * 4 + 2048u);  // the buffer is written once
  Value back = read_pt_bytes(bytes, "mem.pt");
  ASSERT_TRUE(back.equals(root));
  const at::Tensor& a = back.at("parts")[1].as_tensor();
  const at::Tensor& all = back.at("again").as_tensor();
  EXPECT_TRUE(a.storage().is_alias_of(all.storage()));
  EXPECT_EQ(a.storage_offset(), 40);
  all.fill_(-1);
  EXPECT_EQ(a[0].item<float>(), -1.0f);
}

TEST(Pickle, WriterRefusesWhatPythonCouldNotRebuild) {
  Value root = Value::dict();
  root.set("a", Value::dict());
  // A call the tolerant reader did not make (argparse.Namespace(1)): refused. A bare global and a
  // plain instance are written (LossScalersRoundTrip).
  root.at("a").set("obj", Value::object("argparse.Namespace", Value::tuple({1})));
  EXPECT_NE(error_of([&] { pt_bytes(root); }).find("cannot write a.obj: it is a placeholder"),
            std::string::npos);
  root.at("a").set("obj", Value::object("NoModule"));
  EXPECT_NE(error_of([&] { pt_bytes(root); }).find("cannot write a.obj"), std::string::npos);
  at::Tensor f = torch::zeros({4});
  Value twice = Value::list({f, f.view(torch::kInt)});
  EXPECT_NE(error_of([&] {
              pt_bytes(twice);
            }).find("views the storage of an earlier Float tensor as Int"),
            std::string::npos);
  Value sparse = Value::list({torch::eye(3).to_sparse()});
  EXPECT_NE(error_of([&] { pt_bytes(sparse); }).find("only dense"), std::string::npos);
  Value complex = Value::list({torch::zeros({2}, torch::kComplexFloat)});
  EXPECT_NE(error_of([&] { pt_bytes(complex); }).find("not supported"), std::string::npos);
}

// DeepSpeed's loss scalers (checkpoint/ds_objects.h) through the writer and the strict reader; the
// bytes against Python's are Interop.LossScalersPickleAsDeepSpeedDoes.
TEST(Pickle, LossScalersRoundTrip) {
  const Json dynamic = {{"cur_scale", 1024.0},
                        {"dynamic", true},
                        {"cur_iter", 9},
                        {"last_overflow_iter", 4},
                        {"scale_factor", 2.0},
                        {"scale_window", 3},
                        {"min_scale", 0.5},
                        {"delayed_shift", 2},
                        {"cur_hysteresis", 2},
                        {"consecutive_hysteresis", true},
                        {"raise_error_at_min_scale", false}};
  const Json stat = {{"cur_scale", 8.0}, {"dynamic", false}};
  Value v = Value::dict();
  v.set("d", ds_loss_scaler_value(dynamic));
  v.set("s", ds_loss_scaler_value(stat));
  const Value back = round_trip(v);
  EXPECT_TRUE(back.equals(v));
  EXPECT_EQ(back.at("d").as_object().state.at("dtype").as_object().type, "torch.float16");
  EXPECT_EQ(ds_loss_scaler_state(back.at("d"), "mem.pt"), dynamic);
  EXPECT_EQ(ds_loss_scaler_state(back.at("s"), "mem.pt"), stat);
  EXPECT_NE(error_of([&] {
              ds_loss_scaler_value({{"dynamic", true}, {"cur_scale", 1.0}});
            }).find("loss scaler state has no 'cur_iter'"),
            std::string::npos);
  // FP16_Optimizer's fields (fp16 without ZeRO): set on the current state, hysteresis refilled.
  Value fields = Value::dict();
  fields.set("dynamic_loss_scale", true);
  fields.set("cur_scale", 512.0);
  fields.set("cur_iter", 11);
  fields.set("last_overflow_iter", 6);
  fields.set("scale_factor", 2.0);
  fields.set("scale_window", 5);
  Json current = dynamic;
  current["cur_hysteresis"] = 1;
  const Json merged = ds_fp16_optimizer_scaler_state(fields, current, "ckpt");
  Json want = dynamic;
  want["cur_scale"] = 512.0;
  want["cur_iter"] = 11;
  want["last_overflow_iter"] = 6;
  want["scale_window"] = 5;
  want["cur_hysteresis"] = 2;
  EXPECT_EQ(merged, want);
  fields = Value::dict();
  fields.set("dynamic_loss_scale", true);
  fields.set("cur_scale", 512.0);
  EXPECT_NE(error_of([&] {
              ds_fp16_optimizer_scaler_state(fields, dynamic, "ckpt/global_step3");
            }).find("ckpt/global_step3: FP16_Optimizer field 'cur_iter' is missing"),
            std::string::npos);
}

TEST(Pickle, OnlyKeysSkipsOtherStorages) {
  Value root = Value::ordered_dict();
  root.set("module", Value::dict());
  root.at("module").set("w", torch::ones({3}));
  root.set("optimizer", torch::zeros({1000}));
  root.set("step", 4);
  ReadOptions opts;
  opts.only_keys = {"module", "step"};
  Value back = round_trip(root, opts);
  EXPECT_EQ(back.length(), 2u);
  EXPECT_TRUE(back.at("module").at("w").as_tensor().equal(torch::ones({3})));
  EXPECT_EQ(back.at("step").as_int(), 4);
  EXPECT_FALSE(back.contains("optimizer"));
}

// PtIndex: ranged reads of a file's tensors (contiguous, views at an offset, every dtype, bool
// bytes checked, a strided view read whole) equal the tensors read_pt gives; ranges outside the
// tensor and tensors of another file are refused.
TEST(PtIndex, RangedReadsEqualTheTensors) {
  zrt::test::TempDir dir;
  const at::Tensor base = torch::arange(40, torch::kFloat);
  Value v = Value::dict();
  v.set("flat", base);
  v.set("view", base.narrow(0, 7, 20));  // shares base's storage at offset 7
  v.set("matrix", torch::arange(12, torch::kDouble).reshape({3, 4}));
  v.set("bf16", torch::arange(9, torch::kFloat).to(torch::kBFloat16));
  v.set("flags", torch::tensor({true, false, true}));
  v.set("strided", torch::arange(12, torch::kFloat).reshape({3, 4}).t());
  const std::string path = dir / "index.pt";
  save_pt(v, path);
  const Value eager = load_pt(path);
  const PtIndex index(path);
  for (const char* key : {"flat", "view", "matrix", "bf16", "flags", "strided"}) {
    const at::Tensor meta = index.value().at(key).as_tensor();
    ASSERT_TRUE(meta.is_meta()) << key;
    const at::Tensor want = eager.at(key).as_tensor();
    EXPECT_TRUE(torch::equal(index.read(meta), want)) << key;
    if (!meta.is_contiguous()) continue;
    const int64_t n = meta.numel();
    for (const auto& [start, count] :
         std::vector<std::pair<int64_t, int64_t>>{{0, n}, {1, n - 2}, {n / 2, n - n / 2}, {n, 0}}) {
      EXPECT_TRUE(
          torch::equal(index.read(meta, start, count), want.reshape({-1}).narrow(0, start, count)))
          << key << " [" << start << ", +" << count << ")";
    }
  }
  const at::Tensor flat = index.value().at("flat").as_tensor();
  EXPECT_NE(zrt::test::error_of<CheckpointError>([&] {
              index.read(flat, 30, 11);
            }).find("elements [30, 41) of a tensor of 40"),
            std::string::npos);
  EXPECT_NE(zrt::test::error_of<CheckpointError>([&] {
              index.read(torch::zeros({3}), 0, 1);
            }).find("the tensor is not one of this file's"),
            std::string::npos);
}

// A ranged read checks the CRC-32 of the whole storage record it reads from, once, so a flipped
// byte anywhere in the record fails even a read of other elements; records that are not read are
// not checked, and verify_crc = false reads the damaged bytes as they are.
TEST(PtIndex, RangedReadsCheckTheRecordsCrc) {
  zrt::test::TempDir dir;
  Value v = Value::dict();
  v.set("a", torch::arange(40, torch::kFloat));
  v.set("b", torch::arange(10, torch::kFloat));
  const std::string path = dir / "crc.pt";
  save_pt(v, path);
  std::string bytes = zrt::test::read_all(path);
  const float marker = 37.0f;  // only "a" holds it
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&marker), 4));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] ^= 0x01;
  zrt::test::write_all(path, bytes);
  const PtIndex index(path);
  const at::Tensor a = index.value().at("a").as_tensor();
  EXPECT_TRUE(torch::equal(index.read(index.value().at("b").as_tensor()),
                           torch::arange(10, torch::kFloat)));
  EXPECT_NE(zrt::test::error_of<CheckpointError>([&] {
              index.read(a, 0, 1);
            }).find("fails its CRC-32 check"),
            std::string::npos);
  ReadOptions unchecked;
  unchecked.verify_crc = false;
  const PtIndex raw(path, unchecked);
  EXPECT_EQ(raw.read(raw.value().at("a").as_tensor(), 0, 1).item<float>(), 0.0f);
  EXPECT_NE(raw.read(raw.value().at("a").as_tensor(), 37, 1).item<float>(), 37.0f);
}

// map_storages_from: records at least that large are mappings of the file with the same values
// (smaller ones are read), their CRC is still checked, and writing into one changes no file.
TEST(PtReader, MappedStoragesEqualReadOnesAndCheckTheirCrc) {
  zrt::test::TempDir dir;
  Value v = Value::dict();
  v.set("big", torch::arange(5000, torch::kFloat));
  v.set("small", torch::arange(10, torch::kDouble));
  v.set("bf16", torch::arange(3000, torch::kFloat).to(torch::kBFloat16));
  const std::string path = dir / "mapped.pt";
  save_pt(v, path);
  ReadOptions mapped;
  mapped.map_storages_from = 4096;
  const Value eager = load_pt(path);
  const Value lazy = load_pt(path, mapped);
  for (const char* key : {"big", "small", "bf16"}) {
    EXPECT_TRUE(torch::equal(lazy.at(key).as_tensor(), eager.at(key).as_tensor())) << key;
  }
  at::Tensor big = lazy.at("big").as_tensor();
  big.fill_(-1.0f);
  EXPECT_TRUE(
      torch::equal(load_pt(path).at("big").as_tensor(), torch::arange(5000, torch::kFloat)));
  std::string bytes = zrt::test::read_all(path);
  const float marker = 4321.0f;
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&marker), 4));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] ^= 0x01;
  zrt::test::write_all(path, bytes);
  EXPECT_NE(zrt::test::error_of<CheckpointError>([&] {
              load_pt(path, mapped);
            }).find("fails its CRC-32 check"),
            std::string::npos);
}

}  // namespace
}  // namespace zrt::ckpt
