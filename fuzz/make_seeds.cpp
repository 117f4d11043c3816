// Writes the seed corpora of the .pt and safetensors fuzz targets (scripts/fuzz.sh):
//   fuzz_make_seeds OUT_DIR [FILE.pt ...]
// OUT_DIR/pt/: values like the pickler tests' (state dicts, optimizer-like nests, shared storages,
// every dtype, big ints, torch.Size) and the given .pt files (e.g. written by Python's torch.save),
// each as a whole file (selector byte 0) and as its bare data.pkl (selector byte 1), the input
// format of fuzz_pt_reader. OUT_DIR/safetensors/: a few files of write_safetensors.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "checkpoint/io.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/pt/zip_reader.h"

namespace {

using zrt::ckpt::Value;

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The two seeds of one .pt archive.
void add_pt_seeds(const std::string& dir, const std::string& name, const std::string& archive) {
  write(dir + "/" + name + ".zip", std::string(1, '\0') + archive);
  zrt::ckpt::MemorySource source(archive, name);
  zrt::ckpt::ZipReader zip(source, 1 << 20);
  for (const auto& e : zip.entries()) {
    if (e.name.size() >= 8 && e.name.compare(e.name.size() - 8, 8, "data.pkl") == 0) {
      write(dir + "/" + name + ".pkl", std::string(1, '\1') + zip.read_string(e, 1 << 26, false));
    }
  }
}

std::vector<std::pair<std::string, Value>> sample_values() {
  std::vector<std::pair<std::string, Value>> out;
  Value state = Value::ordered_dict();
  at::Tensor flat = at::arange(64, at::kFloat);
  state.set("fc.weight", flat.narrow(0, 0, 30).view({5, 6}));
  state.set("fc.bias", flat.narrow(0, 30, 6));
  state.set("norm", at::ones({3}, at::kHalf));
  state.set("emb", at::zeros({2, 2}, at::kBFloat16));
  out.emplace_back("state_dict", state);

  Value osd = Value::dict();
  Value inner = Value::dict();
  inner.set("zero_stage", 2);
  inner.set("partition_count", Value::list({2}));
  inner.set("single_partition_of_fp32_groups", Value::list({at::randn({7})}));
  inner.set("group_paddings", Value::list({1}));
  Value st = Value::dict();
  Value s0 = Value::dict();
  s0.set("step", 3);
  s0.set("exp_avg", at::zeros({8}));
  s0.set("exp_avg_sq", at::zeros({8}));
  st.set(0, s0);
  Value base = Value::dict();
  base.set("state", st);
  base.set("param_groups", Value::list({Value::dict()}));
  inner.set("base_optimizer_state", base);
  inner.set("loss_scaler", Value::dict());
  osd.set("optimizer_state_dict", inner);
  osd.set("ds_version", "0.16.5");
  out.emplace_back("optim_states", osd);

  Value misc = Value::dict();
  misc.set("none", Value());
  misc.set("flags", Value::list({true, false}));
  misc.set("ints", Value::list({0, -1, 255, 65536, int64_t{1} << 40, INT64_MIN}));
  misc.set("floats", Value::tuple({0.5, -2.25, 1e300}));
  misc.set("shape", Value::torch_size({2, 3, 4}));
  misc.set("text", "h\xc3\xa9llo");
  misc.set("bools", at::arange(3, at::kLong).remainder(2).to(at::kBool));
  misc.set("longs", at::arange(5, at::kLong));
  misc.set("bytes", at::arange(5, at::kByte));
  misc.set("i8", at::arange(4, at::kChar));
  misc.set("i16", at::arange(4, at::kShort));
  misc.set("i32", at::arange(4, at::kInt));
  misc.set("f64", at::arange(4, at::kDouble));
  misc.set("strided", at::arange(12, at::kFloat).view({3, 4}).t());
  misc.set("empty", at::empty({0}));
  out.emplace_back("misc", misc);
  out.emplace_back("empty_dict", Value::dict());
  out.emplace_back("list", Value::list({1, "a", Value::list({Value::tuple({})})}));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds OUT_DIR [FILE.pt ...]\n");
    return 1;
  }
  const std::string out = argv[1];
  std::filesystem::create_directories(out + "/pt");
  std::filesystem::create_directories(out + "/safetensors");
  for (const auto& [name, value] : sample_values()) {
    add_pt_seeds(out + "/pt", name, zrt::ckpt::pt_bytes(value));
  }
  for (int i = 2; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      add_pt_seeds(out + "/pt", "file" + std::to_string(i - 1), bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_make_seeds: skipping %s: %s\n", argv[i], e.what());
    }
  }
  const std::vector<zrt::ckpt::NamedTensors> sets = {
      {},
      {{"w", at::arange(6, at::kFloat).view({2, 3})}, {"b", at::ones({3}, at::kHalf)}},
      {{"e", at::zeros({0, 4}, at::kBFloat16)},
       {"m", at::arange(2, at::kLong).remainder(2).to(at::kBool)},
       {"i", at::arange(3, at::kLong)},
       {"s", at::ones({}, at::kDouble)}},
  };
  for (size_t i = 0; i < sets.size(); ++i) {
    zrt::ckpt::StringSink sink;
    zrt::ckpt::write_safetensors(
        sets[i], sink,
        i == 1 ? zrt::ckpt::StringPairs{{"format", "pt"}} : zrt::ckpt::StringPairs{});
    write(out + "/safetensors/seed" + std::to_string(i) + ".safetensors", sink.data());
  }
  std::printf("fuzz_make_seeds: wrote seeds to %s\n", out.c_str());
  return 0;
}
