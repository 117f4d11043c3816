// zrt-ckpt, run as a binary on checkpoints the engine wrote (stages 0-3, 1-3 ranks, fp32 and
// bf16), on checkpoints the real DeepSpeed wrote (tests/data/deepspeed), and on an HF
// checkpoint-N folder written by zrt-train under mpirun.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/pt/pt_file.h"
#include "checkpoint/safetensors.h"
#include "core/json.h"
#include "tests/support/python.h"
#include "tests/tools/checkpoint_factory.h"

namespace zrt::test {
namespace {

namespace fs = std::filesystem;

ToolResult ckpt_tool(const std::string& args) {
  return run_command(std::string(ZRT_CKPT_TOOL) + " " + args);
}

void expect_same_weights(const std::map<std::string, at::Tensor>& expected,
                         const std::map<std::string, at::Tensor>& got, double tol,
                         const std::string& what) {
  for (const auto& [name, t] : expected) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no " << name;
    ASSERT_EQ(it->second.sizes(), t.sizes()) << what << ": " << name;
    EXPECT_LE((it->second.to(at::kFloat) - t).abs().max().item<double>(), tol)
        << what << ": " << name;
  }
}

std::map<std::string, at::Tensor> as_map(const ckpt::Value& v) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [k, t] : v.as_dict()) out[k.as_str()] = t.as_tensor();
  return out;
}

struct Case {
  int stage, world;
  bool bf16;
};

class ZrtCkptTest : public ::testing::TestWithParam<Case> {};

TEST_P(ZrtCkptTest, InspectVerifyAndToFp32) {
  const Case c = GetParam();
  TempDir dir;
  const std::string save = dir / "save";
  const MadeCheckpoint made = make_engine_checkpoint(save, {c.stage, c.world, c.bf16, 2});
  ASSERT_EQ(made.tag, "global_step2");

  ToolResult r = ckpt_tool("inspect " + shell_quote(save));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("zero stage    " + std::to_string(c.stage)), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("world size    " + std::to_string(c.world)), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(c.bf16 ? "bfloat16" : "float32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("complete: zrt_manifest.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("keys: 'optimizer_state_dict'"), std::string::npos) << r.output;

  r = ckpt_tool("inspect --json " + shell_quote(save));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json j = Json::parse(r.output);
  EXPECT_EQ(j["zero_stage"], c.stage);
  EXPECT_EQ(j["world_size"], c.world);
  EXPECT_EQ(j["global_steps"], 2);
  // 5x7 + 7 + 7x3 + 3 + unused 4 trainable; frozen_scale 3 frozen (recorded from stage 2 on).
  EXPECT_EQ(j["trainable_parameters"], 70);
  EXPECT_EQ(j["parameters"], c.stage >= 2 ? 73 : 70);
  EXPECT_EQ(j["optimizer"], "AdamW");
  EXPECT_EQ(j["optimizer_impl"], "FusedAdam");
  EXPECT_EQ(j["scheduler"], "WarmupLR");
  EXPECT_EQ(j["complete"], true);

  r = ckpt_tool("verify " + shell_quote(save));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ok: "), std::string::npos) << r.output;
  // The tag folder itself and --tag name the same checkpoint.
  EXPECT_EQ(ckpt_tool("verify " + shell_quote(save + "/global_step2/")).exit_code, 0);
  EXPECT_EQ(ckpt_tool("verify --tag global_step2 " + shell_quote(save)).exit_code, 0);

  const double tol = c.bf16 ? 1e-2 : 0.0;
  // Like DeepSpeed, stage 1 records no frozen parameters, so zero_to_fp32 cannot give them.
  std::map<std::string, at::Tensor> expected = made.weights;
  if (c.stage == 1) expected.erase("frozen_scale");
  r = ckpt_tool("to-fp32 " + shell_quote(save) + " " + shell_quote(dir / "w.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto bin = as_map(ckpt::load_pt(dir / "w.bin"));
  expect_same_weights(expected, bin, tol, "w.bin");
  for (const auto& [name, t] : bin) {
    if (name != "frozen_scale") EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
  }

  r = ckpt_tool("to-fp32 --safetensors " + shell_quote(save) + " " + shell_quote(dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ckpt::SafetensorsFile st = ckpt::load_safetensors(dir / "model.safetensors");
  expect_same_weights(expected, {st.tensors.begin(), st.tensors.end()}, tol, "safetensors");

  r = ckpt_tool("to-fp32 --exclude_frozen_parameters " + shell_quote(save) + " " +
                shell_quote(dir / "nofrozen.pt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto nofrozen = as_map(ckpt::load_pt(dir / "nofrozen.pt"));
  EXPECT_EQ(nofrozen.count("frozen_scale"), 0u);
  EXPECT_EQ(nofrozen.count("fc1.weight"), 1u);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, ZrtCkptTest,
                         ::testing::Values(Case{1, 1, false}, Case{2, 2, false}, Case{2, 3, true},
                                           Case{3, 2, false}, Case{3, 3, true}, Case{1, 2, true}),
                         [](const auto& info) {
                           return "stage" + std::to_string(info.param.stage) + "_world" +
                                  std::to_string(info.param.world) +
                                  (info.param.bf16 ? "_bf16" : "_fp32");
                         });

// Stage 0 (fp32 and bf16): inspected, verified and consolidated; the weights are the fp32
// masters the engine trained (for bf16 not the bf16 module copy).
TEST(ZrtCkpt, StageZeroIsInspectedVerifiedAndConsolidated) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    TempDir dir;
    const MadeCheckpoint made = make_engine_checkpoint(dir / "s", {0, 1, bf16, 3});
    ToolResult r = ckpt_tool("inspect " + shell_quote(dir / "s"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("zero stage    0"), std::string::npos) << r.output;
    r = ckpt_tool("verify " + shell_quote(dir / "s"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    r = ckpt_tool("to-fp32 " + shell_quote(dir / "s") + " " + shell_quote(dir / "out.bin"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto got = as_map(ckpt::load_pt(dir / "out.bin"));
    for (const auto& [name, t] : got) {
      // Frozen parameters keep their saved dtype (DeepSpeed's rule); the rest are fp32.
      if (name != "frozen_scale") EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
    }
    if (!bf16) {
      expect_same_weights(made.weights, got, 0.0, "stage 0");
      continue;
    }
    // bf16: the model holds bf16(master); the consolidated weights are the masters themselves.
    bool finer = false;
    for (const auto& [name, w] : made.weights) {
      ASSERT_TRUE(got.count(name)) << name;
      const at::Tensor& m = got.at(name);
      EXPECT_TRUE(m.to(at::kBFloat16).to(at::kFloat).equal(w)) << name;
      finer = finer || !m.to(at::kFloat).equal(w);
    }
    EXPECT_TRUE(finer) << "the bf16 module copy was written instead of the fp32 masters";
  }
}

// A damaged file fails both the manifest's CRC-32 and its own zip CRC: verify names it once; and
// the ok line of a healthy checkpoint is a whole sentence.
TEST(ZrtCkpt, VerifyNamesEachDamagedFileOnce) {
  TempDir dir;
  make_engine_checkpoint(dir / "s", {2, 2, false, 2});
  ToolResult r = ckpt_tool("verify " + shell_quote(dir / "s"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("parameters reassemble from the partitions\n"), std::string::npos)
      << r.output;
  const std::string file = dir / "s/global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0xff);
    f.seekp(100);
    f.write(&c, 1);
  }
  r = ckpt_tool("verify " + shell_quote(dir / "s"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("failed verification (1 problem)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zero_pp_rank_0_mp_rank_00_optim_states.pt: CRC-32"), std::string::npos)
      << r.output;
}

TEST(ZrtCkpt, UsageErrors) {
  EXPECT_EQ(ckpt_tool("").exit_code, 1);
  EXPECT_EQ(ckpt_tool("frobnicate x").exit_code, 1);
  EXPECT_EQ(ckpt_tool("verify").exit_code, 1);
  EXPECT_EQ(ckpt_tool("verify a b").exit_code, 1);
  EXPECT_EQ(ckpt_tool("verify --tag").exit_code, 1);
  EXPECT_EQ(ckpt_tool("inspect --bogus x").exit_code, 1);
  ToolResult r = ckpt_tool("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("to-fp32"), std::string::npos);
  EXPECT_EQ(ckpt_tool("to-fp32 --help").exit_code, 0);
  r = ckpt_tool("verify /nonexistent/zrt/ckpt");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("no such checkpoint directory"), std::string::npos) << r.output;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `zrt-ckpt --help`, `zrt-ckpt help` and `zrt-ckpt SUB --help` (or -h) print usage and exit 0,
// whatever else is on the line; each subcommand's help names all of its options.
TEST(ZrtCkpt, HelpForTheToolAndEverySubcommand) {
  for (const char* line : {"--help", "-h", "help"}) {
    const ToolResult r = ckpt_tool(line);
    EXPECT_EQ(r.exit_code, 0) << line << ": " << r.output;
    for (const char* sub : {"inspect", "verify", "to-fp32"}) {
      EXPECT_TRUE(has(r.output, std::string("zrt-ckpt ") + sub)) << line << ": " << r.output;
    }
  }
  const std::map<std::string, std::vector<std::string>> options = {
      {"inspect", {"DIR", "--tag", "--json", "--help"}},
      {"verify", {"DIR", "--tag", "--allow_no_manifest", "--help"}},
      {"to-fp32", {"DIR OUT", "--tag", "--safetensors", "--exclude_frozen_parameters", "--help"}}};
  for (const auto& [sub, names] : options) {
    for (const std::string& args : {sub + " --help", sub + " -h", sub + " x y z --help"}) {
      const ToolResult r = ckpt_tool(args);
      EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
      EXPECT_TRUE(has(r.output, "zrt-ckpt " + sub)) << args << ": " << r.output;
      for (const std::string& name : names) {
        EXPECT_TRUE(has(r.output, name)) << args << ": no " << name << " in " << r.output;
      }
    }
  }
}

// Bad command lines exit 1 with a message that names the subcommand and what is wrong.
TEST(ZrtCkpt, BadCommandLinesNameTheOptionOrArgument) {
  struct Bad {
    const char* args;
    std::vector<std::string> message;
  };
  const std::vector<Bad> cases = {
      {"inspect --bogus x", {"inspect: unknown option '--bogus'", "usage: zrt-ckpt inspect"}},
      {"verify x --json", {"verify: unknown option '--json'", "usage: zrt-ckpt verify"}},
      {"to-fp32 a b -q", {"to-fp32: unknown option '-q'"}},
      {"inspect x --tag", {"inspect: --tag needs a value"}},
      {"inspect x --json=maybe", {"inspect: a switch takes no value", "'maybe'"}},
      {"verify", {"verify: missing argument DIR"}},
      {"inspect --json", {"inspect: missing argument DIR"}},
      {"to-fp32 dir", {"to-fp32: missing argument OUT"}},
      {"verify a b", {"verify: unexpected argument 'b'"}},
      {"to-fp32 a b c", {"to-fp32: unexpected argument 'c'"}},
      {"frobnicate x", {"unknown subcommand 'frobnicate'"}},
      {"", {"missing subcommand"}},
  };
  for (const Bad& c : cases) {
    const ToolResult r = ckpt_tool(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.output;
    for (const std::string& part : c.message) {
      EXPECT_TRUE(has(r.output, part)) << c.args << ": no \"" << part << "\" in " << r.output;
    }
  }
}

// The old spellings still work: dashed option names, --name=value, and "--" before a path.
TEST(ZrtCkpt, OptionSpellings) {
  TempDir dir;
  make_engine_checkpoint(dir / "s", {2, 1, false, 1});
  const std::string save = shell_quote(dir / "s");
  ToolResult r = ckpt_tool("verify --tag=global_step1 " + save);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = ckpt_tool("verify --allow-no-manifest -- " + save);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = ckpt_tool("inspect " + save + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "\"tag\": \"global_step1\"")) << r.output;
  r = ckpt_tool("to-fp32 --exclude-frozen-parameters " + save + " " +
                shell_quote(dir / "w.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "w.safetensors"));
}

TEST(ZrtCkpt, OutputFolderMustExistAndNothingIsWrittenOnFailure) {
  TempDir dir;
  make_engine_checkpoint(dir / "s", {2, 1, false, 1});
  ToolResult r =
      ckpt_tool("to-fp32 " + shell_quote(dir / "s") + " " + shell_quote(dir / "no/w.bin"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "no"));
}

// Checkpoints the real DeepSpeed wrote (tests/data/deepspeed, made by
// tests/peers/make_ds_fixtures.py with DeepSpeed 0.19.8: DeepSpeed's own objects in the pickles,
// no manifest, no RNG files): inspect names the writer and stage, verify needs
// --allow_no_manifest, and to-fp32 equals DeepSpeed's own zero_to_fp32 of them bit for bit
// (fp32.safetensors, stored by the same script). No Python at test time.
TEST(ZrtCkpt, DeepSpeedWrittenCheckpoint) {
  const fs::path data = fs::path(ZRT_SOURCE_DIR) / "tests/data/deepspeed";
  int checked = 0;
  for (const char* name : {"ds_s1_w1", "ds_s2_w2", "ds_s2_w4", "ds_s3_w3", "ds_s1_w2_bf16",
                           "ds_s2_w2_bf16", "ds_s3_w2_bf16"}) {
    SCOPED_TRACE(name);
    const int stage = name[4] - '0';
    const std::string ckpt = shell_quote((data / name / "checkpoint-3").string());
    ToolResult r = ckpt_tool("inspect " + ckpt);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("DeepSpeed (ds_version 0.19.8)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("none: checkpoint tag 'global_step3'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("zero stage    " + std::to_string(stage)), std::string::npos)
        << r.output;
    r = ckpt_tool("verify " + ckpt);
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("is incomplete"), std::string::npos) << r.output;
    r = ckpt_tool("verify --allow_no_manifest " + ckpt);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    TempDir dir;
    r = ckpt_tool("to-fp32 " + ckpt + " " + shell_quote(dir / "w.safetensors"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, at::Tensor> got, want;
    for (auto& [k, t] : ckpt::load_safetensors(dir / "w.safetensors").tensors) got[k] = t;
    for (auto& [k, t] : ckpt::load_safetensors((data / name / "fp32.safetensors").string()).tensors)
      want[k] = t;
    ASSERT_EQ(want.size(), 6u) << "the MLP of make_ds_fixtures.py has 6 parameters";
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, w] : want) {
      ASSERT_EQ(got.count(key), 1u) << key;
      const at::Tensor& g = got.at(key);
      EXPECT_EQ(g.scalar_type(), at::kFloat) << key;
      EXPECT_TRUE(g.sizes() == w.sizes() && torch::equal(g, w))
          << key << ": zrt-ckpt to-fp32 differs from DeepSpeed's zero_to_fp32";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

// Without a manifest, verify still finds every damage torch.load finds: two bytes flipped at
// each of the last 160 offsets of an optimizer file (the zip64 end records, the end record, the
// central directory, the small records) and at offsets spread over the rest. Differential: the
// same damaged files are loaded by torch in one Python process; whenever torch fails, verify
// --allow_no_manifest must exit 3. (weights_only=False: an optimizer file holds DeepSpeed's loss
// scaler object, and DeepSpeed loads these files that way.)
TEST(ZrtCkpt, VerifyWithoutManifestFindsWhatTorchLoadFinds) {
  ZRT_REQUIRE_PYTHON("torch");
  TempDir dir;
  make_engine_checkpoint(dir / "s", {2, 2, false, 2});
  const std::string tag = dir / "s/global_step2";
  fs::remove(tag + "/zrt_manifest.json");
  const std::string name = "zero_pp_rank_1_mp_rank_00_optim_states.pt";
  std::string bytes;
  {
    std::ifstream in(tag + "/" + name, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::vector<size_t> offsets;
  for (size_t back = 2; back <= 160; ++back) offsets.push_back(bytes.size() - back);
  for (size_t off = 0; off + 160 < bytes.size(); off += 997) offsets.push_back(off);
  fs::create_directories(dir / "damaged");
  for (size_t i = 0; i < offsets.size(); ++i) {
    std::string d = bytes;
    d[offsets[i]] = static_cast<char>(d[offsets[i]] ^ 0xFF);
    d[offsets[i] + 1] = static_cast<char>(d[offsets[i] + 1] ^ 0x0F);
    std::ofstream(dir / ("damaged/" + std::to_string(i) + ".pt"), std::ios::binary) << d;
  }
  const ToolResult torch_side = run_command(
      zrt::test::python_path() +
      " -c \"import sys, torch, warnings; warnings.filterwarnings('ignore')\n"
      "for i in range(int(sys.argv[2])):\n"
      "    try:\n"
      "        torch.load(f'{sys.argv[1]}/{i}.pt', weights_only=False); print(i, 'ok')\n"
      "    except Exception:\n"
      "        print(i, 'bad')\" " +
      shell_quote(dir / "damaged") + " " + std::to_string(offsets.size()));
  ASSERT_EQ(torch_side.exit_code, 0) << torch_side.output;
  std::istringstream lines(torch_side.output);
  int torch_bad = 0, checked = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    size_t i = 0;
    std::string verdict;
    if (!(words >> i >> verdict) || verdict != "bad") continue;
    ++torch_bad;
    fs::copy_file(dir / ("damaged/" + std::to_string(i) + ".pt"), tag + "/" + name,
                  fs::copy_options::overwrite_existing);
    const ToolResult r = ckpt_tool("verify --allow_no_manifest " + shell_quote(tag));
    ++checked;
    EXPECT_EQ(r.exit_code, 3) << "offset " << offsets[i] << " of " << bytes.size()
                              << ": torch.load fails, verify passed:\n" << r.output;
  }
  EXPECT_GT(torch_bad, 100) << "the damage should break torch.load at most offsets";
  EXPECT_EQ(checked, torch_bad);
}

TEST(ZrtCkpt, PythonLoadsToFp32Output) {
  ZRT_REQUIRE_PYTHON("torch");
  TempDir dir;
  const MadeCheckpoint made = make_engine_checkpoint(dir / "s", {3, 3, false, 2});
  ASSERT_EQ(
      ckpt_tool("to-fp32 " + shell_quote(dir / "s") + " " + shell_quote(dir.path())).exit_code, 0);
  const ToolResult r = run_command(
      zrt::test::python_path() +
      " -c \"import torch,sys; sd = torch.load(sys.argv[1], weights_only=True); "
      "print(sorted((k, tuple(v.shape), str(v.dtype)) for k, v in sd.items()))\" " +
      shell_quote(dir / "pytorch_model.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("('fc1.weight', (7, 5), 'torch.float32')"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("('frozen_scale', (3,), 'torch.float32')"), std::string::npos)
      << r.output;
}

#ifdef ZRT_MPIEXEC
// An HF checkpoint-N folder written by the real zrt-train under mpirun.
// zrt-train on 2 ranks with the MLP: `flags` added.
ToolResult run_zrt_train_mlp(const TempDir& dir, const std::string& out, const std::string& flags) {
  return run_command(
      std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") + ZRT_MPIEXEC +
      " -np 2 --oversubscribe --bind-to none --timeout 240 -x ZRT_PROGRESS=lines " +
      ZRT_TRAIN_TOOL +
      " --model mlp --deepspeed " + ZRT_SOURCE_DIR + "/examples/configs/zero2.json --output_dir " +
      shell_quote(dir / out) + " --max_steps 4 --save_steps 2 --logging_steps 100 " + flags);
}

// checkpoint-N folders as the HF Trainer writes them: the model's weights (save_model) next to
// the engine checkpoint and a zero_to_fp32.py that consolidates as DeepSpeed's script does. The
// run has --eval_strategy steps and no --do_* flag: it trains (and evaluates every 2 steps).
TEST(ZrtCkpt, HfCheckpointFolderFromZrtTrain) {
  TempDir dir;
  ToolResult r = run_zrt_train_mlp(dir, "", "--eval_strategy steps --eval_steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Progress as lines on stderr (what zrt-launch asks for when its output is not a terminal;
  // mpirun gives the ranks a terminal of its own): the last one at the end.
  EXPECT_NE(r.output.find("100% | step 4/4 |"), std::string::npos) << r.output;
  // The communication summary: no more time waited than the collectives were in flight.
  double spent = 0, waited = 0;
  ASSERT_NE(r.output.find("train: communication "), std::string::npos) << r.output;
  ASSERT_EQ(std::sscanf(r.output.c_str() + r.output.find("train: communication "),
                        "train: communication %lf s in %*u collectives, %lf s", &spent, &waited),
            2)
      << r.output;
  EXPECT_LE(waited, spent + 1e-3) << r.output;
  const std::string last = dir / "checkpoint-4";
  ASSERT_TRUE(fs::exists(last + "/model.safetensors")) << r.output;
  r = run_command("python3 " + shell_quote(last + "/zero_to_fp32.py") + " " + shell_quote(last) +
                  " " + shell_quote(dir / "script.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, at::Tensor> by_script;
  for (auto& [name, t] : ckpt::load_safetensors(dir / "script.safetensors").tensors) {
    by_script[name] = t;
  }
  const auto saved = ckpt::load_safetensors(last + "/model.safetensors").tensors;
  ASSERT_EQ(by_script.size(), saved.size());
  for (const auto& [name, t] : saved) {
    ASSERT_EQ(by_script.count(name), 1u) << name;
    EXPECT_TRUE(by_script[name].equal(t)) << name;
  }
  // save_only_model: the model and trainer_state.json only; no engine checkpoint.
  r = run_zrt_train_mlp(dir, "model_only", "--save_only_model");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "model_only/checkpoint-2/model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model_only/checkpoint-2/trainer_state.json"));
  EXPECT_FALSE(fs::exists(dir / "model_only/checkpoint-2/latest"));
  EXPECT_FALSE(fs::exists(dir / "model_only/checkpoint-2/global_step2"));
  for (const char* step : {"checkpoint-2", "checkpoint-4"}) {
    r = ckpt_tool("verify " + shell_quote(dir / step));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO stage 2, world size 2"), std::string::npos) << r.output;
  }
  r = ckpt_tool("inspect " + shell_quote(dir / "checkpoint-4"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("global steps  4"), std::string::npos) << r.output;
  r = ckpt_tool("to-fp32 " + shell_quote(dir / "checkpoint-4") + " " +
                shell_quote(dir / "m.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(ckpt::load_safetensors(dir / "m.safetensors").tensors.size(), 0u);
}

// zrt-train resumes from checkpoints the real DeepSpeed wrote (tests/data/deepspeed: no manifest,
// DeepSpeed's pickled LossScaler, no ZeroRT position in the data) and continues as DeepSpeed
// itself did (expected.json, final.safetensors): losses of steps 4-6 within fp32 rounding (rtol
// 1e-5) and the final weights within the training parity tolerance (rtol 1e-4, atol 1e-6). The
// config and arguments are tests/peers/ckpt_common.py's.
TEST(ZrtCkpt, ZrtTrainResumesFromDeepSpeedWrittenCheckpoint) {
  const fs::path data = fs::path(ZRT_SOURCE_DIR) / "tests/data/deepspeed";
  for (const char* name : {"ds_s1_w2", "ds_s2_w2", "ds_s3_w2"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    dir.write("ds.json", std::string(R"({"train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1, "train_batch_size": 8, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.999],
                      "eps": 1e-8, "weight_decay": 0.01}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0,
                      "warmup_max_lr": 0.01, "warmup_num_steps": 2, "total_num_steps": 6,
                      "warmup_type": "linear"}},
        "zero_optimization": {"stage": )") + name[4] + "}}");
    const std::string cmd =
        std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") + ZRT_MPIEXEC +
        " -np 2 --oversubscribe --bind-to none --timeout 240 -x ZRT_PROGRESS=lines " +
      ZRT_TRAIN_TOOL +
        " --model mlp --width 8 --layers 1 --deepspeed " + shell_quote(dir / "ds.json") +
        " --output_dir " + shell_quote(dir / "out") +
        " --max_steps 6 --save_steps 3 --logging_steps 1 --learning_rate 0.01"
        " --weight_decay 0.01 --warmup_steps 2 --per_device_train_batch_size 4"
        " --report_to none --resume_from_checkpoint " +
        shell_quote((data / name / "checkpoint-3").string());
    ToolResult r = run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Json want = Json::parse(std::ifstream(data / name / "expected.json"));
    const Json state = Json::parse(std::ifstream(dir / "out/trainer_state.json"));
    std::vector<double> losses;
    for (const Json& e : state["log_history"]) {
      if (e.contains("loss") && e["step"].get<int>() >= 4) losses.push_back(e["loss"]);
    }
    ASSERT_EQ(losses.size(), 3u) << state.dump();
    for (size_t i = 0; i < 3; ++i) {
      const double w = want["losses"][i].get<double>();
      EXPECT_LE(std::abs(losses[i] - w), 1e-5 * std::abs(w)) << "step " << i + 4;
    }
    r = ckpt_tool("to-fp32 " + shell_quote(dir / "out/checkpoint-6") + " " +
                  shell_quote(dir / "w.safetensors"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, at::Tensor> got;
    for (auto& [k, t] : ckpt::load_safetensors(dir / "w.safetensors").tensors) got[k] = t;
    for (auto& [k, w] : ckpt::load_safetensors((data / name / "final.safetensors").string()).tensors) {
      ASSERT_EQ(got.count(k), 1u) << k;
      EXPECT_TRUE(((got[k] - w).abs() <= 1e-6 + 1e-4 * w.abs()).all().item<bool>())
          << k << ": max |diff| " << (got[k] - w).abs().max().item<double>();
    }
  }
}
#endif

}  // namespace
}  // namespace zrt::test
