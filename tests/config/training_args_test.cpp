// TrainingArguments: HF defaults, HF flag spelling through cxxopts, get_warmup_steps, checks.
#include "config/training_args_flags.h"

#include <cxxopts.hpp>
#include <gtest/gtest.h>

#include "test_util.h"

namespace zrt::config {
namespace {

TrainingArguments parse(std::vector<std::string> args) {
  cxxopts::Options options("test");
  add_training_arguments(options);
  std::vector<std::string> joined = join_bool_flag_values(args);
  std::vector<const char*> argv = {"test"};
  for (const auto& a : joined) argv.push_back(a.c_str());
  auto result = options.parse(static_cast<int>(argv.size()), argv.data());
  return parse_training_arguments(result);
}

std::string usage_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  } catch (const cxxopts::exceptions::exception& e) {
    return std::string("cxxopts: ") + e.what();
  }
  return "<no error>";
}

TEST(TrainingArguments, HfDefaults) {
  const TrainingArguments a;
  EXPECT_EQ(a.per_device_train_batch_size, 8);
  EXPECT_EQ(a.per_device_eval_batch_size, 8);
  EXPECT_EQ(a.gradient_accumulation_steps, 1);
  EXPECT_EQ(a.learning_rate, 5e-5);
  EXPECT_EQ(a.weight_decay, 0.0);
  EXPECT_EQ(a.adam_beta1, 0.9);
  EXPECT_EQ(a.adam_beta2, 0.999);
  EXPECT_EQ(a.adam_epsilon, 1e-8);
  EXPECT_EQ(a.max_grad_norm, 1.0);
  EXPECT_EQ(a.num_train_epochs, 3.0);
  EXPECT_EQ(a.max_steps, -1);
  EXPECT_EQ(a.lr_scheduler_type, "linear");
  EXPECT_EQ(a.warmup_ratio, 0.0);
  EXPECT_EQ(a.warmup_steps, 0);
  EXPECT_EQ(a.logging_steps, 500);
  EXPECT_EQ(a.save_steps, 500);
  EXPECT_FALSE(a.save_total_limit.has_value());
  EXPECT_FALSE(a.eval_steps.has_value());
  EXPECT_EQ(a.seed, 42);
  EXPECT_FALSE(a.fp16 || a.bf16 || a.fp16_full_eval || a.bf16_full_eval);
  EXPECT_EQ(a.fp16_backend, "auto");
  EXPECT_FALSE(a.save_on_each_node);
  EXPECT_FALSE(a.adafactor);
  EXPECT_EQ(a.optim, "adamw_torch");
  EXPECT_FALSE(a.deepspeed.has_value());
  EXPECT_FALSE(a.resume_from_checkpoint.has_value());
}

TEST(TrainingArguments, ParsedDefaultsEqualStructDefaults) {
  const TrainingArguments parsed = parse({});
  const TrainingArguments plain;
  EXPECT_EQ(parsed.learning_rate, plain.learning_rate);
  EXPECT_EQ(parsed.adam_epsilon, plain.adam_epsilon);
  EXPECT_EQ(parsed.per_device_train_batch_size, plain.per_device_train_batch_size);
  EXPECT_EQ(parsed.output_dir, plain.output_dir);
  EXPECT_EQ(parsed.lr_scheduler_kwargs, Json::object());
}

TEST(TrainingArguments, HfFlagSpelling) {
  const TrainingArguments a = parse({"--per_device_train_batch_size",
                                     "4",
                                     "--gradient_accumulation_steps",
                                     "2",
                                     "--learning_rate",
                                     "3e-4",
                                     "--max_steps",
                                     "-1",
                                     "--fp16",
                                     "--do_train",
                                     "true",
                                     "--do_eval=false",
                                     "--save_total_limit",
                                     "2",
                                     "--deepspeed",
                                     "ds.json",
                                     "--output_dir",
                                     "out",
                                     "--lr_scheduler_type",
                                     "cosine",
                                     "--lr_scheduler_kwargs",
                                     R"({"num_cycles": 1.5})",
                                     "--resume_from_checkpoint",
                                     "out/checkpoint-10",
                                     "--save_on_each_node",
                                     "yes",
                                     "--bf16_full_eval",
                                     "0"});
  EXPECT_EQ(a.per_device_train_batch_size, 4);
  EXPECT_EQ(a.gradient_accumulation_steps, 2);
  EXPECT_EQ(a.learning_rate, 3e-4);
  EXPECT_TRUE(a.fp16);
  EXPECT_TRUE(a.do_train);
  EXPECT_FALSE(a.do_eval);
  EXPECT_EQ(a.save_total_limit, std::optional<int64_t>(2));
  EXPECT_EQ(a.deepspeed, std::optional<std::string>("ds.json"));
  EXPECT_EQ(a.output_dir, "out");
  EXPECT_EQ(a.lr_scheduler_type, "cosine");
  EXPECT_EQ(a.lr_scheduler_kwargs["num_cycles"], 1.5);
  EXPECT_EQ(a.resume_from_checkpoint, std::optional<std::string>("out/checkpoint-10"));
  EXPECT_TRUE(a.save_on_each_node);
  EXPECT_FALSE(a.bf16_full_eval);
}

// --use_cpu is read (HF's device rule in zrt-train), not on the warned no-effect list.
TEST(TrainingArguments, UseCpuIsRead) {
  EXPECT_FALSE(parse({}).use_cpu);
  EXPECT_TRUE(parse({"--use_cpu"}).use_cpu);
  EXPECT_FALSE(parse({"--use_cpu", "false"}).use_cpu);
  for (const auto& ignored : ignored_training_arguments()) EXPECT_NE(ignored.name, "use_cpu");
}

TEST(TrainingArguments, JoinBoolFlagValues) {
  EXPECT_EQ(join_bool_flag_values({"--fp16", "false", "--bf16", "--seed", "1", "--do_train", "x"}),
            (std::vector<std::string>{"--fp16=false", "--bf16", "--seed", "1", "--do_train", "x"}));
  EXPECT_EQ(join_bool_flag_values({"--seed", "true"}),
            (std::vector<std::string>{"--seed", "true"}));
}

TEST(TrainingArguments, BadValues) {
  EXPECT_EQ(usage_error({"--fp16", "--bf16"}),
            "At most one of fp16 and bf16 can be True, but not both");
  EXPECT_EQ(usage_error({"--fp16_full_eval", "--bf16_full_eval"}),
            "At most one of fp16 and bf16 can be True for full eval, but not both");
  EXPECT_EQ(usage_error({"--warmup_ratio", "1.5"}), "warmup_ratio must lie in range [0,1]");
  EXPECT_EQ(usage_error({"--fp16=maybe"}),
            "Truthy value expected: got maybe but expected one of yes/no, true/false, t/f, y/n, "
            "1/0 (case insensitive).");
  EXPECT_EQ(usage_error({"--lr_scheduler_type", "exotic"}),
            "argument --lr_scheduler_type: invalid choice: 'exotic' (choose from 'linear', "
            "'cosine', 'cosine_with_restarts', 'polynomial', 'constant', 'constant_with_warmup', "
            "'inverse_sqrt', 'reduce_lr_on_plateau', 'cosine_with_min_lr', "
            "'warmup_stable_decay')");
  EXPECT_EQ(usage_error({"--lr_scheduler_kwargs", "{oops"}),
            "--lr_scheduler_kwargs: not valid JSON: {oops");
  EXPECT_CONTAINS(usage_error({"--per_device_train_batch_size", "four"}), "cxxopts:");
  // As transformers 5.24's TrainingArguments (tests/peers checks the same cases against it).
  EXPECT_EQ(usage_error({"--logging_steps", "0"}),
            "logging strategy IntervalStrategy.STEPS requires non-zero --logging_steps");
  EXPECT_EQ(parse({"--logging_strategy", "no", "--logging_steps", "0"}).logging_steps, 0);
  EXPECT_EQ(usage_error({"--logging_steps", "2.5"}),
            "--logging_steps must be an integer if bigger than 1: 2.5");
  EXPECT_EQ(usage_error({"--save_steps", "7.5"}),
            "--save_steps must be an integer if bigger than 1: 7.5");
  EXPECT_EQ(parse({"--save_steps", "0"}).save_steps, 0);  // accepted: never saves by steps
  EXPECT_EQ(parse({"--logging_steps", "0.25"}).logging_steps, 0.25);  // a fraction of the run
  EXPECT_EQ(usage_error({"--bf16", "--fp16_backend", "apex"}),
            " `--half_precision_backend apex`: bf16 is not supported by apex. Use "
            "`--half_precision_backend amp` instead");
}

TEST(TrainingArguments, AdafactorSwitchSetsOptim) {
  EXPECT_EQ(parse({"--adafactor"}).optim, "adafactor");
}

TEST(TrainingArguments, WarmupStepsRuleOfTransformers4) {
  TrainingArguments a;
  a.warmup_ratio = 0.1;
  EXPECT_EQ(a.get_warmup_steps(1000), 100);
  EXPECT_EQ(a.get_warmup_steps(15), 2);  // ceil(1.5)
  EXPECT_EQ(a.get_warmup_steps(0), 0);
  a.warmup_steps = 7;  // > 0 wins over the ratio
  EXPECT_EQ(a.get_warmup_steps(1000), 7);
}

// transformers 5: warmup_steps is a float; below 1 it is a ratio of the training steps.
TEST(TrainingArguments, WarmupStepsRuleOfTransformers5) {
  const TrainingArguments ratio = parse({"--warmup_steps", "0.1"});
  EXPECT_EQ(ratio.warmup_steps, 0.1);
  EXPECT_EQ(ratio.get_warmup_steps(1000), 100);
  EXPECT_EQ(ratio.get_warmup_steps(15), 2);                               // ceil(1.5)
  EXPECT_EQ(parse({"--warmup_steps", "7.9"}).get_warmup_steps(1000), 7);  // int(7.9)
  EXPECT_EQ(parse({"--warmup_steps", "1"}).get_warmup_steps(1000), 1);
  EXPECT_EQ(usage_error({"--warmup_steps", "-1"}),
            "Got warmup_steps = -1, Expected value warmup_steps >= 0");
}

TEST(TrainingArguments, HfBool) {
  for (const char* t : {"yes", "TRUE", "t", "Y", "1"}) EXPECT_TRUE(parse_hf_bool(t)) << t;
  for (const char* f : {"no", "False", "f", "n", "0"}) EXPECT_FALSE(parse_hf_bool(f)) << f;
  EXPECT_THROW(parse_hf_bool("2"), UsageError);
}

// Strategies and best-model tracking: HF's defaults and __post_init__ rules (the same cases run
// against transformers itself in tests/peers/hf_smoke.py).
TEST(TrainingArguments, StrategiesAndBestModel) {
  const TrainingArguments d = parse({});
  EXPECT_EQ(d.eval_strategy, "no");
  EXPECT_EQ(d.save_strategy, "steps");
  EXPECT_EQ(d.logging_strategy, "steps");
  EXPECT_FALSE(d.do_eval);
  EXPECT_TRUE(d.report_to.empty());
  const TrainingArguments steps = parse({"--eval_strategy", "steps", "--logging_steps", "7"});
  EXPECT_TRUE(steps.do_eval);
  EXPECT_EQ(steps.eval_steps, std::optional<double>(7));
  EXPECT_EQ(parse({"--evaluation_strategy", "epoch"}).eval_strategy, "epoch");
  EXPECT_CONTAINS(usage_error({"--evaluation_strategy", "epoch", "--eval_strategy", "steps"}),
                  "give one");
  EXPECT_EQ(usage_error({"--eval_strategy", "sometimes"}),
            "argument --eval_strategy: invalid choice: 'sometimes' (choose from 'no', 'steps', "
            "'epoch')");
  EXPECT_EQ(usage_error({"--eval_strategy", "steps", "--logging_steps", "0"}),
            "evaluation strategy IntervalStrategy.STEPS requires either non-zero --eval_steps or "
            "--logging_steps");
  EXPECT_CONTAINS(usage_error({"--load_best_model_at_end", "--eval_strategy", "epoch"}),
                  "requires the save and eval strategy to match");
  EXPECT_CONTAINS(usage_error({"--load_best_model_at_end", "--eval_strategy", "steps",
                               "--eval_steps", "30", "--save_steps", "50"}),
                  "50, which is not a round multiple of 30");
  const TrainingArguments best = parse({"--load_best_model_at_end", "--eval_strategy", "steps",
                                        "--eval_steps", "25", "--save_steps", "50"});
  EXPECT_EQ(best.metric_for_best_model, std::optional<std::string>("loss"));
  EXPECT_EQ(best.greater_is_better, std::optional<bool>(false));
  EXPECT_EQ(best.best_metric_key(), std::optional<std::string>("eval_loss"));
  EXPECT_EQ(parse({"--metric_for_best_model", "accuracy"}).greater_is_better,
            std::optional<bool>(true));
  EXPECT_EQ(parse({"--save_strategy", "best"}).metric_for_best_model,
            std::optional<std::string>("loss"));
  EXPECT_EQ(parse({"--report_to", "all"}).report_to,
            (std::vector<std::string>{"csv", "tensorboard"}));
  EXPECT_EQ(parse({"--report_to", "none"}).report_to, std::vector<std::string>{});
  EXPECT_CONTAINS(usage_error({"--report_to", "wandb"}), "--report_to wandb");
  const TrainingArguments first = parse({"--logging_first_step", "--run_name", "r1"});
  EXPECT_TRUE(first.logging_first_step);
  EXPECT_EQ(first.run_name, std::optional<std::string>("r1"));
}

TEST(TrainingArguments, TransformersArgumentsWithoutEffectAreAcceptedAndRecorded) {
  const TrainingArguments a =
      parse({"--push_to_hub", "--dataloader_pin_memory", "false", "--ddp_timeout", "60",
             "--label_names", "labels", "--seed", "3"});
  EXPECT_EQ(a.seed, 3);
  EXPECT_EQ(a.ignored, (std::vector<std::pair<std::string, std::string>>{
                           {"push_to_hub", "true"},
                           {"dataloader_pin_memory", "false"},
                           {"label_names", "labels"},
                           {"ddp_timeout", "60"}}));
}

// Flags that change what is trained are read (label smoothing, model-only checkpoints, log
// levels); those ZeroRT cannot honour are refused with what to do instead.
TEST(TrainingArguments, FlagsThatChangeTheRunAreReadOrRefused) {
  const TrainingArguments a =
      parse({"--label_smoothing_factor", "0.1", "--save_only_model", "--log_level", "debug",
             "--log_level_replica", "error"});
  EXPECT_EQ(a.label_smoothing_factor, 0.1);
  EXPECT_TRUE(a.save_only_model);
  EXPECT_EQ(a.log_level, "debug");
  EXPECT_EQ(a.log_level_replica, "error");
  EXPECT_TRUE(a.ignored.empty());
  EXPECT_CONTAINS(usage_error({"--label_smoothing_factor", "1.5"}),
                  "--label_smoothing_factor must be in [0, 1], got 1.5");
  EXPECT_CONTAINS(usage_error({"--group_by_length"}),
                  "--group_by_length: transformers 5 removed this flag");
  EXPECT_CONTAINS(usage_error({"--train_sampling_strategy", "group_by_length"}),
                  "--train_sampling_strategy group_by_length: ZeroRT draws batches in the HF "
                  "Trainer's default order");
  EXPECT_TRUE(usage_error({"--train_sampling_strategy", "random"}) == "<no error>");
  EXPECT_CONTAINS(usage_error({"--log_level_replica", "verbose"}),
                  "argument --log_level_replica: invalid choice: 'verbose'");
}

}  // namespace
}  // namespace zrt::config
