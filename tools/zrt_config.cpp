// zrt-config: dry-runs a DeepSpeed config exactly as a ZeroRT HF-Trainer job would read it.
//
//   zrt-config resolve --deepspeed ds.json [TrainingArguments flags] [--world_size N]
//       [--num_training_steps N] [--hidden_size H | --hidden_sizes A,B,...] [--inference]
//
// prints the resolved config as JSON on stdout (exit 0), every problem on stderr (exit 2), or
// usage (exit 1). A subcommand is a run function and a row of the table in main().
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "config/hf_plan.h"
#include "config/resolved.h"
#include "config/training_args.h"
#include "core/error.h"
#include "core/tool_main.h"
#include "sched/schedule_preview.h"

namespace {

using zrt::UsageError;
using Args = std::vector<std::string>;

int run_resolve(const Args& args);
int run_schedule(const Args& args);

const char kUsage[] =
    "usage: zrt-config <subcommand> [options]\n"
    "       zrt-config <subcommand> --help\n\nsubcommands:\n"
    "  resolve   print the fully resolved DeepSpeed config as JSON\n"
    "  schedule  print the learning rate of every optimizer step as CSV (--plot FILE.svg)\n";

// Parses `args` (without the program and subcommand names) with cxxopts, turning its
// exceptions into UsageError.
cxxopts::ParseResult parse_options(cxxopts::Options& options, const Args& args) {
  std::vector<std::string> storage = zrt::config::join_bool_flag_values(args);
  std::vector<const char*> argv = {"zrt-config"};
  for (const auto& a : storage) argv.push_back(a.c_str());
  try {
    cxxopts::ParseResult result = options.parse(static_cast<int>(argv.size()), argv.data());
    if (!result.unmatched().empty()) {
      throw UsageError(zrt::str("unexpected argument '", result.unmatched().front(), "'"));
    }
    return result;
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
}

std::vector<int64_t> parse_size_list(const std::string& text) {
  std::vector<int64_t> sizes;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value <= 0) {
      throw UsageError(
          zrt::str("--hidden_sizes: expected positive integers separated by commas, "
                   "got '",
                   text, "'"));
    }
    sizes.push_back(value);
    start = comma + 1;
  }
  return sizes;
}

int run_resolve(const Args& args) {
  using cxxopts::value;
  cxxopts::Options options("zrt-config resolve",
                           "Resolves a DeepSpeed config as a ZeroRT HF-Trainer job would and "
                           "prints it as JSON.");
  options.add_options()("h,help", "Show this help")("world_size", "Data-parallel world size",
                                                    value<int>()->default_value("1"))(
      "num_training_steps", "Total optimizer steps (default: --max_steps when > 0)",
      value<int64_t>())("hidden_size", "The model's hidden size (for hidden-size \"auto\" keys)",
                        value<int64_t>())(
      "hidden_sizes", "Comma-separated hidden sizes (their maximum is used)", value<std::string>())(
      "inference", "ZeRO-3 inference: drop the optimizer section");
  zrt::config::add_training_arguments(options);
  cxxopts::ParseResult result = parse_options(options, args);
  if (result.count("help")) {
    std::printf("%s", options.help().c_str());
    return 0;
  }
  const zrt::config::TrainingArguments training = zrt::config::parse_training_arguments(result);
  if (!training.deepspeed) throw UsageError("--deepspeed FILE is required");

  zrt::config::TrainerConfigOptions opts;
  opts.world_size = result["world_size"].as<int>();
  if (opts.world_size < 1) {
    throw UsageError(zrt::str("--world_size must be at least 1, got ", opts.world_size));
  }
  if (result.count("num_training_steps")) {
    opts.num_training_steps = result["num_training_steps"].as<int64_t>();
    if (*opts.num_training_steps < 0) {
      throw UsageError(
          zrt::str("--num_training_steps must be >= 0, got ", *opts.num_training_steps));
    }
  }
  if (result.count("hidden_size") && result.count("hidden_sizes")) {
    throw UsageError("give --hidden_size or --hidden_sizes, not both");
  }
  if (result.count("hidden_size")) {
    opts.model.hidden_size = result["hidden_size"].as<int64_t>();
    if (*opts.model.hidden_size <= 0) {
      throw UsageError(zrt::str("--hidden_size must be positive, got ", *opts.model.hidden_size));
    }
  }
  if (result.count("hidden_sizes")) {
    opts.model.hidden_sizes = parse_size_list(result["hidden_sizes"].as<std::string>());
  }
  opts.inference = result.count("inference") > 0 && result["inference"].as<bool>();

  zrt::config::TrainerConfig config;
  try {
    config = zrt::config::prepare_trainer_config(training, opts);
  } catch (const zrt::ConfigError& e) {
    const std::string message = e.what();
    if (message.rfind("The model's config file has neither", 0) == 0) {
      throw zrt::ConfigError(message +
                             "\n(zrt-config: pass --hidden_size H or --hidden_sizes A,B,... to "
                             "give the model's hidden size)");
    }
    throw;
  }
  std::printf("%s\n", zrt::config::to_json(config.resolved).dump(2).c_str());
  return 0;
}

// zrt-config schedule: the learning rate of every optimizer step as CSV (and optionally a plot).
int run_schedule(const Args& args) {
  using cxxopts::value;
  cxxopts::Options options("zrt-config schedule",
                           "Prints step,lr (and momentum for OneCycle) for steps 0..N-1 of the "
                           "schedule a ZeroRT HF-Trainer job would use.");
  options.add_options()("h,help", "Show this help")("world_size", "Data-parallel world size",
                                                    value<int>()->default_value("1"))(
      "num_training_steps", "Total optimizer steps N (required)", value<int64_t>())(
      "plot", "Also write the curve as an SVG picture to this file", value<std::string>());
  zrt::config::add_training_arguments(options);
  cxxopts::ParseResult result = parse_options(options, args);
  if (result.count("help")) {
    std::printf("%s", options.help().c_str());
    return 0;
  }
  const zrt::config::TrainingArguments training = zrt::config::parse_training_arguments(result);
  if (!training.deepspeed) throw UsageError("--deepspeed FILE is required");
  if (!result.count("num_training_steps")) throw UsageError("--num_training_steps N is required");
  zrt::config::TrainerConfigOptions opts;
  opts.world_size = result["world_size"].as<int>();
  if (opts.world_size < 1) {
    throw UsageError(zrt::str("--world_size must be at least 1, got ", opts.world_size));
  }
  opts.num_training_steps = result["num_training_steps"].as<int64_t>();
  if (*opts.num_training_steps < 1) {
    throw UsageError(zrt::str("--num_training_steps must be >= 1, got ", *opts.num_training_steps));
  }
  // Hidden-size "auto" keys do not affect the schedule; any value lets them resolve.
  opts.model.hidden_size = 1;
  const zrt::config::TrainerConfig config = zrt::config::prepare_trainer_config(training, opts);
  const zrt::config::ResolvedConfig& rc = config.resolved;
  std::optional<zrt::sched::SchedulerSpec> spec = rc.scheduler;
  if (!spec && config.plan && config.plan->hf_scheduler) spec = *config.plan->hf_scheduler;
  if (!spec) throw zrt::ConfigError("the config defines no learning-rate schedule");
  const zrt::optim::OptimizerSpec* optimizer = nullptr;
  if (rc.optimizer) optimizer = &*rc.optimizer;
  if (!optimizer && config.plan && config.plan->hf_optimizer)
    optimizer = &*config.plan->hf_optimizer;
  if (!optimizer) throw zrt::ConfigError("the config defines no optimizer, so there is no base lr");
  const bool sgd = optimizer->kind == zrt::optim::OptimizerKind::kSgd;
  const double base_lr = sgd ? optimizer->sgd.lr : optimizer->adam.lr;
  const int64_t steps = *opts.num_training_steps;
  std::ostringstream csv;
  zrt::sched::write_schedule_csv(csv, *spec, {base_lr}, steps, /*optimizer_has_betas=*/!sgd);
  std::fwrite(csv.str().data(), 1, csv.str().size(), stdout);
  if (result.count("plot")) {
    const std::string path = result["plot"].as<std::string>();
    zrt::sched::write_schedule_svg(path, *spec, {base_lr}, steps, "", /*optimizer_has_betas=*/!sgd);
    std::fprintf(stderr, "zrt-config: wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zrt::run_subcommand_tool("zrt-config", argc, argv,
                                  {{"resolve", run_resolve}, {"schedule", run_schedule}}, kUsage);
}
