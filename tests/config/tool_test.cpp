// The zrt-config binary: exit codes (0 ok, 1 usage, 2 config error), JSON on stdout, errors on
// stderr.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

#include "test_util.h"
#include <sys/wait.h>
#include <unistd.h>

namespace zrt::config {
namespace {

struct ToolResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

ToolResult run_tool(const std::string& args) {
  static const test::TempDir dir("zrt_config_tool");
  const std::string base = dir / "run";
  const std::string command = std::string("'") + ZRT_CONFIG_TOOL + "' " + args + " >'" + base +
                              ".out' 2>'" + base + ".err'";
  const int status = std::system(command.c_str());
  ToolResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(base + ".out");
  r.err = read_file(base + ".err");
  std::filesystem::remove(base + ".out");
  std::filesystem::remove(base + ".err");
  return r;
}

std::string example(const std::string& name) {
  return std::string("'") + ZRT_SOURCE_DIR + "/examples/configs/" + name + ".json'";
}

TEST(Tool, ResolvePrintsJson) {
  const ToolResult r = run_tool("resolve --deepspeed " + example("zero3") +
                                " --world_size 4 --num_training_steps 500 --warmup_ratio 0.1 "
                                "--hidden_size 1024 --per_device_train_batch_size 2 --bf16 true");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["train_batch_size"], 8);
  EXPECT_EQ(j["bf16"]["enabled"], true);
  EXPECT_EQ(j["fp16"]["enabled"], false);
  EXPECT_EQ(j["zero_optimization"]["stage3_prefetch_bucket_size"], 943718);
  EXPECT_EQ(j["scheduler"]["params"]["warmup_num_steps"], 50);
  EXPECT_EQ(j["optimizer"]["params"]["lr"], 5e-5);
}

TEST(Tool, ResolveEveryExample) {
  const char* flags = " --num_training_steps 100 --hidden_size 512";
  for (const char* name : {"zero0", "zero1", "zero2", "zero2_offload", "zero3", "zero3_offload"}) {
    const ToolResult r = run_tool(std::string("resolve --deepspeed ") + example(name) + flags);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_NO_THROW(Json::parse(r.out)) << name;
  }
  EXPECT_EQ(run_tool("resolve --deepspeed " + example("bf16_zero2") + flags + " --bf16").exit_code,
            0);
  EXPECT_EQ(run_tool("resolve --deepspeed " + example("fp16_zero2") + flags + " --fp16").exit_code,
            0);
  EXPECT_EQ(run_tool("resolve --deepspeed " + example("zero3_inference") +
                     " --hidden_sizes 256,1024 --inference")
                .exit_code,
            0);
}

TEST(Tool, ConfigErrorsExitTwo) {
  const ToolResult mismatch = run_tool("resolve --deepspeed " + example("fp16_zero2") +
                                       " --num_training_steps 10 --hidden_size 64");
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_TRUE(mismatch.out.empty());
  EXPECT_CONTAINS(mismatch.err,
                  "zrt-config: error: Please correct the following DeepSpeed config values that "
                  "mismatch TrainingArguments values:\n- ds fp16.enabled=True vs hf "
                  "fp16|fp16_full_eval=False");
  const ToolResult hidden = run_tool("resolve --deepspeed " + example("zero3"));
  EXPECT_EQ(hidden.exit_code, 2);
  EXPECT_CONTAINS(hidden.err, "pass --hidden_size H");
  const ToolResult steps = run_tool("resolve --deepspeed " + example("zero3") + " --hidden_size 8");
  EXPECT_EQ(steps.exit_code, 2);
  EXPECT_CONTAINS(steps.err, "scheduler.params.warmup_num_steps is \"auto\"");
  EXPECT_EQ(run_tool("resolve --deepspeed /nonexistent.json").exit_code, 2);
  EXPECT_EQ(run_tool("resolve --deepspeed " + example("zero2") + " --inference").exit_code, 2);
}

TEST(Tool, UsageErrorsExitOne) {
  EXPECT_EQ(run_tool("").exit_code, 1);
  const ToolResult unknown_sub = run_tool("frobnicate");
  EXPECT_EQ(unknown_sub.exit_code, 1);
  EXPECT_CONTAINS(unknown_sub.err, "unknown subcommand 'frobnicate'");
  const ToolResult unknown_flag = run_tool("resolve --deepspeed x.json --no_such_flag 3");
  EXPECT_EQ(unknown_flag.exit_code, 1);
  EXPECT_CONTAINS(unknown_flag.err, "no_such_flag");
  EXPECT_EQ(run_tool("resolve").exit_code, 1);  // --deepspeed missing
  EXPECT_EQ(run_tool("resolve --deepspeed x.json --world_size 0").exit_code, 1);
  EXPECT_EQ(run_tool("resolve --deepspeed x.json --hidden_size 4 --hidden_sizes 4").exit_code, 1);
  EXPECT_EQ(run_tool("resolve --deepspeed x.json --hidden_sizes 4,,5").exit_code, 1);
  EXPECT_EQ(run_tool("resolve --deepspeed x.json --fp16 --bf16").exit_code, 1);
  EXPECT_EQ(run_tool("resolve --deepspeed x.json stray").exit_code, 1);
  EXPECT_EQ(run_tool("resolve --deepspeed x.json --per_device_train_batch_size many").exit_code, 1);
}

TEST(Tool, HelpExitsZero) {
  const ToolResult top = run_tool("--help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_CONTAINS(top.out, "resolve");
  const ToolResult sub = run_tool("resolve --help");
  EXPECT_EQ(sub.exit_code, 0);
  EXPECT_CONTAINS(sub.out, "--per_device_train_batch_size");
  EXPECT_CONTAINS(sub.out, "--hidden_sizes");
}

}  // namespace
}  // namespace zrt::config

namespace zrt::config {
namespace {

TEST(Tool, SchedulePrintsCsvAndPlots) {
  const test::TempDir dir("zrt_sched");
  const std::string svg = dir / "lr.svg";
  const ToolResult r = run_tool("schedule --deepspeed " + example("zero2") +
                                " --num_training_steps 6 --learning_rate 1 --warmup_steps 4 "
                                "--plot '" +
                                svg + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // WarmupLR (log) filled by the HF layer: min 0, max 1, N = 4.
  EXPECT_EQ(r.out, "step,lr\n0,0\n1,0\n2,0.5\n3,0.7924812503605781\n4,1\n5,1\n");
  const std::string picture = read_file(svg);
  EXPECT_EQ(picture.rfind("<svg", 0), 0u) << picture.substr(0, 80);
}

TEST(Tool, ScheduleOneCycleHasMomentumAndNeedsSteps) {
  const test::TempDir dir("zrt_oc");
  const std::string cfg = dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 0.1}},
    "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.1, "cycle_max_lr": 1,
      "cycle_first_step_size": 4, "decay_lr_rate": 0.5, "decay_step_size": 2}}})");
  const ToolResult r = run_tool("schedule --config '" + cfg + "' --num_training_steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 0.9 − (0.9 − 0.8)·0.5 in doubles, as Python prints it.
  EXPECT_EQ(r.out, "step,lr,momentum\n0,0.1,0.8\n1,0.325,0.875\n2,0.55,0.8500000000000001\n");
  EXPECT_EQ(run_tool("schedule --config '" + cfg + "'").exit_code, 1);
  std::filesystem::remove(cfg);
}

// The pure-DeepSpeed path (--config): what zrt::initialize(model, "ds.json") reads. An explicit
// lr that is not HF's default previews as it is; TrainingArguments flags and "auto" are refused.
TEST(Tool, ConfigIsThePureDeepSpeedPath) {
  const test::TempDir dir("zrt_pure");
  const std::string cfg = dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2, "warmup_type": "linear"}}})");
  const ToolResult sched = run_tool("schedule --config '" + cfg + "' --num_training_steps 4");
  ASSERT_EQ(sched.exit_code, 0) << sched.err;
  // WarmupLR's max lr defaults to the optimizer's lr (DeepSpeed 0.19).
  EXPECT_EQ(sched.out, "step,lr\n0,0\n1,0\n2,0.00015\n3,3e-04\n");
  const ToolResult resolved = run_tool("resolve --config '" + cfg + "' --world_size 4");
  ASSERT_EQ(resolved.exit_code, 0) << resolved.err;
  const Json j = Json::parse(resolved.out);
  EXPECT_EQ(j["train_batch_size"], 8);
  EXPECT_EQ(j["optimizer"]["params"]["lr"], 3e-4);
  EXPECT_TRUE(j["scheduler"]["params"]["warmup_max_lr"].is_null());
  // The same config on the HF path: its lr mismatches HF's default --learning_rate.
  EXPECT_EQ(run_tool("schedule --deepspeed '" + cfg + "' --num_training_steps 4").exit_code, 2);
  const ToolResult flag = run_tool("resolve --config '" + cfg + "' --learning_rate 1e-3");
  EXPECT_EQ(flag.exit_code, 1);
  EXPECT_CONTAINS(flag.err, "--learning_rate has no meaning with --config");
  EXPECT_EQ(run_tool("resolve --config '" + cfg + "' --deepspeed '" + cfg + "'").exit_code, 1);
  const ToolResult automatic =
      run_tool(R"(resolve --config '{"train_micro_batch_size_per_gpu": "auto"}')");
  EXPECT_EQ(automatic.exit_code, 2);
  EXPECT_CONTAINS(automatic.err,
                  "which only the HF Trainer fills (from "
                  "--per_device_train_batch_size)");
  // ZeRO 1/2 need an optimizer: in the config, or the program's own (--client_optimizer).
  const char* no_optimizer = R"('{"train_batch_size": 8, "zero_optimization": {"stage": 2}}')";
  EXPECT_EQ(run_tool(std::string("resolve --config ") + no_optimizer).exit_code, 2);
  EXPECT_EQ(
      run_tool(std::string("resolve --config ") + no_optimizer + " --client_optimizer").exit_code,
      0);
}

// --cases: many cases in one process, one JSON line each; a case's failure is its result.
TEST(Tool, CasesRunManyInOneProcess) {
  const test::TempDir dir("zrt_cases");
  const std::string cases =
      dir.write("cases.jsonl",
                R"({"id": "ok", "argv": ["--config", "{\"train_batch_size\": 4}"]}
{"id": 7, "argv": ["--config", "{\"train_batch_size\": \"auto\"}"]}
["--config", "{}", "--learning_rate", "1"]
)");
  const ToolResult r = run_tool("resolve --cases '" + cases + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<Json> out;
  while (std::getline(lines, line)) out.push_back(Json::parse(line));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["id"], "ok");
  EXPECT_EQ(out[0]["exit"], 0);
  EXPECT_EQ(out[0]["resolved"]["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(out[1]["id"], 7);
  EXPECT_EQ(out[1]["exit"], 2);
  EXPECT_CONTAINS(out[1]["error"].get<std::string>(), "train_batch_size is \"auto\"");
  EXPECT_EQ(out[2]["id"], 3);  // the line number
  EXPECT_EQ(out[2]["exit"], 1);
  const ToolResult sched = run_tool("schedule --cases '" + cases + "'");
  EXPECT_EQ(sched.exit_code, 0);
  EXPECT_EQ(run_tool("resolve --cases '" + cases + "' --world_size 2").exit_code, 1);
  EXPECT_EQ(run_tool("resolve --cases /nonexistent.jsonl").exit_code, 1);
}

}  // namespace
}  // namespace zrt::config
