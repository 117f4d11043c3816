// Bad input of every kind gives a clear ConfigError, never a crash or another exception.
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "config/diagnostics.h"
#include "config/ds_config.h"
#include "config/hf_plan.h"
#include "config/load.h"
#include "test_util.h"

namespace zrt::config {
namespace {

using test::config_error;

// Loads `source` the way --deepspeed does, then resolves with world size 2.
std::string load_and_resolve_error(const std::string& source) {
  return config_error([&] {
    ResolveOptions options;
    options.world_size = 2;
    resolve_config(load_config_source(source), options);
  });
}

struct BadCase {
  const char* name;
  const char* source;
  const char* expected;  // a substring of the message
};

TEST(BadInput, EachIsAClearConfigError) {
  const BadCase cases[] = {
      {"not json", "{\"train_batch_size\": 8,,}", "<string>: not valid JSON"},
      {"truncated json", "{\"train_batch_size\": 8", "not valid JSON"},
      {"base64 garbage", "%%%not-base64%%%", "Expected a string path to an existing deepspeed"},
      {"binary base64", "_____w==", "Expected a string path to an existing deepspeed"},
      {"top-level array", "[{\"train_batch_size\": 8}]", "must be a JSON object"},
      {"duplicate keys", "{\"train_batch_size\": 8, \"fp16\": {}, \"fp16\": {}}",
       "Duplicate keys in DeepSpeed config: ['fp16']"},
      {"huge number", "{\"train_batch_size\": 1e400}", "not valid JSON"},
      {"int beyond int64", "{\"train_batch_size\": 9223372036854775808}",
       "train_batch_size: expected an integer, got 9223372036854775808 (too large for a 64-bit "
       "integer)"},
      {"big float batch", "{\"train_batch_size\": 1e30}", "too large for a 64-bit integer"},
      {"fractional batch", "{\"train_batch_size\": 8.5}", "(a number with a fractional part)"},
      {"string batch", "{\"train_batch_size\": \"8\"}", "got \"8\" (a string)"},
      {"bool batch", "{\"train_batch_size\": true}", "expected an integer, got true"},
      {"negative batch", "{\"train_batch_size\": -8}",
       "Train batch size: -8 has to be greater than 0"},
      // DeepSpeed derives TBS = MBS * GAS * W = 0 first, so its first assertion fires.
      {"zero micro batch", "{\"train_micro_batch_size_per_gpu\": 0}",
       "Train batch size: 0 has to be greater than 0"},
      {"zero grad accum",
       "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 0}",
       "Train batch size: 0 has to be greater than 0"},
      {"zero micro batch with train batch",
       "{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 0}",
       "Micro batch size per gpu: 0 has to be greater than 0"},
      {"triad does not divide", "{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 4}",
       "10 != 4 * 1 * 2"},
      {"triad floors to zero", "{\"train_batch_size\": 6, \"train_micro_batch_size_per_gpu\": 4}",
       "Gradient accumulation steps: 0 has to be greater than 0"},
      {"triad inconsistent",
       "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4, "
       "\"gradient_accumulation_steps\": 2}",
       "32 != 4 * 2 * 2"},
      {"no batch at all", "{\"gradient_accumulation_steps\": 2}",
       "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"},
      {"negative bucket",
       "{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": -5}}",
       "zero_optimization.reduce_bucket_size: expected a positive integer, got -5"},
      {"empty reduce bucket",
       "{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": 0}}",
       "zero_optimization.reduce_bucket_size: expected a positive integer, got 0"},
      {"empty allgather bucket",
       "{\"train_batch_size\": 8, \"zero_optimization\": {\"allgather_bucket_size\": 0}}",
       "zero_optimization.allgather_bucket_size: expected a positive integer, got 0"},
      {"fractional bucket",
       "{\"train_batch_size\": 8, \"zero_optimization\": {\"allgather_bucket_size\": 250000000.5}}",
       "zero_optimization.allgather_bucket_size: expected a positive integer, got 250000000.5 "
       "(a number with a fractional part)"},
      {"zero loss scale window",
       "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, "
       "\"loss_scale_window\": 0}}",
       "fp16.loss_scale_window must be > 0 when dynamic loss scaling is "
       "enabled (loss_scale=0)"},
      {"misspelled zero key",
       "{\"train_batch_size\": 8, \"zero_optimization\": {\"contigous_gradients\": true}}",
       "unknown key (did you mean \"contiguous_gradients\"?)"},
      {"misspelled fp16 key", "{\"train_batch_size\": 8, \"fp16\": {\"enabeld\": true}}",
       "fp16.enabeld: unknown key (did you mean \"enabled\"?)"},
      {"fp16 and bf16",
       "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, "
       "\"bf16\": {\"enabled\": true}}",
       "bfloat16 and fp16 modes cannot be simultaneously enabled"},
      {"section of wrong type", "{\"train_batch_size\": 8, \"optimizer\": [\"AdamW\"]}",
       "optimizer: expected an object, got an array"},
      {"optimizer type not a string", "{\"train_batch_size\": 8, \"optimizer\": {\"type\": 1}}",
       "optimizer.type: expected a string, got 1"},
      {"scheduler params wrong type",
       "{\"train_batch_size\": 8, \"optimizer\": {\"type\": "
       "\"AdamW\"}, \"scheduler\": {\"type\": \"WarmupLR\", "
       "\"params\": 5}}",
       "scheduler.params: expected an object, got 5"},
      {"leftover auto", "{\"train_batch_size\": \"auto\"}",
       "train_batch_size is \"auto\", which only the HF Trainer fills (from world_size * "
       "--per_device_train_batch_size * --gradient_accumulation_steps)"},
      {"nan-ish string", "{\"train_batch_size\": 8, \"gradient_clipping\": \"NaN\"}",
       "gradient_clipping: expected a non-negative number, got \"NaN\" (a string)"},
  };
  for (const BadCase& c : cases) {
    const std::string message = load_and_resolve_error(c.source);
    EXPECT_PRED2(test::contains, message, c.expected) << "case: " << c.name;
    EXPECT_EQ(message.find("<no error>"), std::string::npos) << "case: " << c.name;
    EXPECT_EQ(message.find("<other:"), std::string::npos) << "case: " << c.name;
  }
}

// Replaces the value at every leaf of a full config with values of every wrong kind; each
// result must either resolve or be a ConfigError.
void visit_leaves(Json& node, const std::function<void(Json&)>& fn) {
  if (node.is_object() || node.is_array()) {
    for (auto& child : node) visit_leaves(child, fn);
  } else {
    fn(node);
  }
}

TEST(BadInput, EveryLeafWithEveryWrongValueNeverCrashes) {
  TrainingArguments args;
  args.deepspeed = std::string(ZRT_SOURCE_DIR) + "/examples/configs/zero3.json";
  TrainerConfigOptions options;
  options.world_size = 2;
  options.num_training_steps = 100;
  options.model.hidden_size = 64;
  const Json base = to_json(prepare_trainer_config(args, options).resolved);
  const std::vector<Json> replacements = {
      Json("auto"),
      Json("x"),
      Json(-1),
      Json(0),
      Json(1.5),
      Json(1e30),
      Json(true),
      Json(nullptr),
      Json::array(),
      Json::object(),
      Json(-1e-9),
      Json(UINT64_MAX),
      Json::array({1, "a"}),
      Json("nvme"),
  };
  std::size_t leaves = 0;
  std::size_t accepted = 0;
  std::size_t rejected = 0;
  Json probe = base;
  visit_leaves(probe, [&](Json&) { ++leaves; });
  for (std::size_t leaf = 0; leaf < leaves; ++leaf) {
    for (const Json& replacement : replacements) {
      Json config = base;
      std::size_t index = 0;
      visit_leaves(config, [&](Json& value) {
        if (index++ == leaf) value = replacement;
      });
      try {
        ResolveOptions ro;
        ro.world_size = 2;
        resolve_config(config, ro);
        ++accepted;
      } catch (const ConfigError& e) {
        EXPECT_FALSE(std::string(e.what()).empty());
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "leaf " << leaf << " = " << replacement.dump() << ": " << e.what();
      }
    }
  }
  EXPECT_GT(leaves, 80u);
  EXPECT_GT(rejected, accepted);  // most wrong values are rejected
}

TEST(BadInput, HfLayerOnMalformedSections) {
  // A section that is not an object where the HF layer must walk through it.
  EXPECT_EQ(config_error([] {
              HfTrainerDeepSpeedConfig hf(DeepSpeedConfig(test::J(R"({"optimizer": "adamw"})")));
              hf.trainer_config_process(TrainingArguments{}, 1);
            }),
            "cannot look up \"optimizer.params.lr\" in the DeepSpeed config: \"optimizer\" is "
            "'adamw', not an object");
  EXPECT_EQ(config_error([] {
              TrainingArguments args;
              args.save_on_each_node = true;
              HfTrainerDeepSpeedConfig hf(DeepSpeedConfig(test::J(R"({"checkpoint": 3})")));
              hf.trainer_config_process(args, 1);
            }),
            "checkpoint: expected an object, got 3");
}

}  // namespace
}  // namespace zrt::config

namespace zrt::config {
namespace {

// Suggestions are for misspellings only: close matches get one, unrelated keys none.
TEST(DidYouMean, SuggestsOnlyCloseMatches) {
  const std::vector<std::string_view> top = {"aio", "fp16", "bf16", "optimizer", "scheduler",
                                             "zero_optimization", "train_batch_size"};
  EXPECT_EQ(did_you_mean("foo", top), std::nullopt);
  EXPECT_EQ(did_you_mean("xyz", top), std::nullopt);
  EXPECT_EQ(did_you_mean("ai", top).value_or(""), "aio");
  EXPECT_EQ(did_you_mean("fp17", top).value_or(""), "fp16");
  EXPECT_EQ(did_you_mean("optimzer", top).value_or(""), "optimizer");
  EXPECT_EQ(did_you_mean("zero_optimisation", top).value_or(""), "zero_optimization");
  EXPECT_EQ(did_you_mean("train_batchsize", top).value_or(""), "train_batch_size");
}

}  // namespace
}  // namespace zrt::config
