// zrt-config: dry-runs a DeepSpeed config exactly as a ZeroRT job would read it.
//
//   zrt-config resolve --deepspeed ds.json [TrainingArguments flags] [--world_size N]
//       [--num_training_steps N] [--hidden_size H | --hidden_sizes A,B,...] [--inference]
//   zrt-config resolve --config ds.json [--world_size N] [--client_optimizer]
//   zrt-config schedule --deepspeed ds.json --num_training_steps N [flags] [--plot FILE.svg]
//   zrt-config schedule --config ds.json --num_training_steps N [--plot FILE.svg]
//   zrt-config resolve|schedule --cases FILE.jsonl
//
// --deepspeed is the HF-Trainer path (zrt-train, zrt::initialize(model, TrainingArguments)): the
// "auto" values are filled from the TrainingArguments and mismatches are errors. --config is the
// pure-DeepSpeed path (zrt::initialize(model, "ds.json"), deepspeed.initialize without the HF
// Trainer): no TrainingArguments, no HF rules, any "auto" outside zero_optimization is an error.
// --cases runs many cases in one process (the differential tests): each line of FILE is
// {"id": ..., "argv": [arguments]} (or just the array), and each gives one JSON line on stdout:
// {"id", "exit", "resolved" | "csv", "warnings"} or {"id", "exit", "error"}.
//
// prints the resolved config as JSON on stdout (exit 0), every problem on stderr (exit 2), or
// usage (exit 1). A subcommand is a run function and a row of the table in main().
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "config/hf_plan.h"
#include "config/load.h"
#include "config/resolved.h"
#include "config/training_args_flags.h"
#include "core/error.h"
#include "core/tool_main.h"
#include "report/schedule_plot.h"
#include "sched/schedule_preview.h"

namespace {

using zrt::Json;
using zrt::UsageError;
using Args = std::vector<std::string>;

int run_resolve(const Args& args);
int run_schedule(const Args& args);

const char kUsage[] =
    "usage: zrt-config <subcommand> [options]\n"
    "       zrt-config <subcommand> --help\n\nsubcommands:\n"
    "  resolve   print the fully resolved DeepSpeed config as JSON\n"
    "  schedule  print the learning rate of every optimizer step as CSV (--plot FILE.svg)\n"
    "\n--deepspeed FILE reads the config as the HF Trainer does (TrainingArguments flags fill\n"
    "\"auto\"); --config FILE reads it as DeepSpeed alone does (no TrainingArguments, no "
    "\"auto\").\n";

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

// The options every mode of both subcommands shares.
void add_common_options(cxxopts::Options& options) {
  using cxxopts::value;
  options.add_options()("h,help", "Show this help")(
      "config",
      "The pure-DeepSpeed path: a DeepSpeed config (file, JSON text or urlsafe base64) read as "
      "zrt::initialize(model, config) / deepspeed.initialize read it, without TrainingArguments",
      value<std::string>())("world_size", "Data-parallel world size",
                            value<int>()->default_value("1"))(
      "cases",
      "Run many cases: each line of FILE is {\"id\": ..., \"argv\": [arguments]}; prints one JSON "
      "line per case",
      value<std::string>());
}

int world_size_option(const cxxopts::ParseResult& result) {
  const int world_size = result["world_size"].as<int>();
  if (world_size < 1)
    throw UsageError(zrt::str("--world_size must be at least 1, got ", world_size));
  return world_size;
}

// --config (pure DeepSpeed) or --deepspeed (HF Trainer), never both. In pure mode only the
// options named in `allowed` may be given: TrainingArguments flags have no meaning there.
bool pure_deepspeed_mode(const cxxopts::ParseResult& result, const std::set<std::string>& allowed) {
  const bool pure = result.count("config") > 0;
  const bool hf = result.count("deepspeed") > 0;
  if (pure && hf) {
    throw UsageError(
        "give --config (the pure-DeepSpeed path) or --deepspeed (the HF-Trainer path), not both");
  }
  if (!pure && !hf) {
    throw UsageError(
        "--deepspeed FILE (the HF-Trainer path) or --config FILE (the pure-DeepSpeed path) is "
        "required");
  }
  if (pure) {
    for (const auto& kv : result.arguments()) {
      if (allowed.count(kv.key()) == 0) {
        throw UsageError(zrt::str(
            "--", kv.key(),
            " has no meaning with --config: the pure-DeepSpeed path reads no TrainingArguments "
            "and fills no \"auto\" (use --deepspeed FILE for the HF-Trainer path)"));
      }
    }
  }
  return pure;
}

// The config of a pure-DeepSpeed run, resolved as zrt::initialize(model, config) does.
zrt::config::ResolvedConfig resolve_pure(const std::string& source, int world_size,
                                         bool client_optimizer) {
  zrt::config::ResolveOptions ro;
  ro.world_size = world_size;
  ro.client_optimizer = client_optimizer;
  return zrt::config::resolve_config(zrt::config::load_config_source(source), ro);
}

// The resolved config of one `resolve` command line (without --cases).
zrt::config::ResolvedConfig resolve_case(const cxxopts::ParseResult& result) {
  if (pure_deepspeed_mode(result, {"config", "world_size", "client_optimizer"})) {
    return resolve_pure(
        result["config"].as<std::string>(), world_size_option(result),
        result.count("client_optimizer") > 0 && result["client_optimizer"].as<bool>());
  }
  if (result.count("client_optimizer")) {
    throw UsageError(
        "--client_optimizer belongs to --config: on the HF-Trainer path the Trainer decides (it "
        "builds the optimizer from --optim when the config has none)");
  }
  const zrt::config::TrainingArguments training = zrt::config::parse_training_arguments(result);
  zrt::config::TrainerConfigOptions opts;
  opts.world_size = world_size_option(result);
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
  try {
    return zrt::config::prepare_trainer_config(training, opts).resolved;
  } catch (const zrt::ConfigError& e) {
    const std::string message = e.what();
    if (message.rfind("The model's config file has neither", 0) == 0) {
      throw zrt::ConfigError(message +
                             "\n(zrt-config: pass --hidden_size H or --hidden_sizes A,B,... to "
                             "give the model's hidden size)");
    }
    throw;
  }
}

// Runs `one` on the arguments of every line of `path`; prints one JSON line per case. A case's
// failure is its output, not the tool's: the tool's exit status is 0 once the file was read.
int run_cases(const std::string& path, const std::function<Json(const Args&)>& one) {
  std::ifstream in(path);
  if (!in) throw UsageError(zrt::str("--cases: cannot read ", path));
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json out = Json::object();
    Args args;
    try {
      const Json item = Json::parse(line);
      const Json& argv = item.is_object() ? item.at("argv") : item;
      out["id"] = item.is_object() && item.contains("id") ? item["id"] : Json(number);
      for (const Json& a : argv) args.push_back(a.get<std::string>());
    } catch (const std::exception& e) {
      throw UsageError(zrt::str("--cases: line ", number, " of ", path,
                                " is not {\"id\": ..., \"argv\": [strings]}: ", e.what()));
    }
    try {
      Json result = one(args);
      out["exit"] = 0;
      out.update(result);
    } catch (const zrt::Error& e) {
      out["exit"] = static_cast<int>(e.exit_code());
      out["error"] = e.what();
    } catch (const std::exception& e) {
      out["exit"] = static_cast<int>(zrt::ExitCode::kInternal);
      out["error"] = zrt::str("internal error: ", e.what());
    }
    std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    std::fflush(stdout);
  }
  return 0;
}

void reject_cases_with_others(const cxxopts::ParseResult& result) {
  if (result.count("cases") && result.arguments().size() > 1) {
    throw UsageError("--cases FILE takes no other options: each line of FILE holds the arguments");
  }
}

cxxopts::Options resolve_options() {
  using cxxopts::value;
  cxxopts::Options options("zrt-config resolve",
                           "Resolves a DeepSpeed config as a ZeroRT job would and prints it as "
                           "JSON: --deepspeed FILE as the HF Trainer reads it, --config FILE as "
                           "DeepSpeed alone reads it.");
  add_common_options(options);
  options.add_options()("num_training_steps",
                        "Total optimizer steps (default: --max_steps when > 0)", value<int64_t>())(
      "hidden_size", "The model's hidden size (for hidden-size \"auto\" keys)", value<int64_t>())(
      "hidden_sizes", "Comma-separated hidden sizes (their maximum is used)", value<std::string>())(
      "inference", "ZeRO-3 inference: drop the optimizer section")(
      "client_optimizer",
      "With --config: the program passes its own optimizer (needed at ZeRO stage 1/2 when the "
      "config has no \"optimizer\")");
  zrt::config::add_training_arguments(options);
  return options;
}

Json resolve_json(const Args& args) {
  cxxopts::Options options = resolve_options();
  const cxxopts::ParseResult result = parse_options(options, args);
  if (result.count("cases")) throw UsageError("--cases cannot be nested in a case");
  const zrt::config::ResolvedConfig rc = resolve_case(result);
  return {{"resolved", zrt::config::to_json(rc)}, {"warnings", rc.warnings}};
}

int run_resolve(const Args& args) {
  cxxopts::Options options = resolve_options();
  cxxopts::ParseResult result = parse_options(options, args);
  if (result.count("help")) {
    std::printf("%s", options.help().c_str());
    return 0;
  }
  reject_cases_with_others(result);
  if (result.count("cases")) return run_cases(result["cases"].as<std::string>(), resolve_json);
  const zrt::config::ResolvedConfig rc = resolve_case(result);
  std::printf("%s\n", zrt::config::to_json(rc).dump(2).c_str());
  return 0;
}

// What `schedule` previews: the schedule and the lr of the optimizer it steps.
struct SchedulePlan {
  zrt::sched::SchedulerSpec spec;
  double base_lr = 0.0;
  bool has_betas = true;
  int64_t steps = 0;
};

cxxopts::Options schedule_options() {
  using cxxopts::value;
  cxxopts::Options options("zrt-config schedule",
                           "Prints step,lr (and momentum for OneCycle) for steps 0..N-1 of the "
                           "schedule a ZeroRT job would use: --deepspeed FILE as the HF Trainer "
                           "reads it, --config FILE as DeepSpeed alone reads it.");
  add_common_options(options);
  options.add_options()("num_training_steps", "Total optimizer steps N (required)",
                        value<int64_t>())(
      "plot", "Also write the curve as an SVG picture to this file", value<std::string>());
  zrt::config::add_training_arguments(options);
  return options;
}

SchedulePlan schedule_plan(const cxxopts::ParseResult& result) {
  const bool pure =
      pure_deepspeed_mode(result, {"config", "world_size", "num_training_steps", "plot"});
  if (!result.count("num_training_steps")) throw UsageError("--num_training_steps N is required");
  SchedulePlan plan;
  plan.steps = result["num_training_steps"].as<int64_t>();
  if (plan.steps < 1) {
    throw UsageError(zrt::str("--num_training_steps must be >= 1, got ", plan.steps));
  }
  const int world_size = world_size_option(result);
  std::optional<zrt::sched::SchedulerSpec> spec;
  const zrt::optim::OptimizerSpec* optimizer = nullptr;
  zrt::config::TrainerConfig config;
  if (pure) {
    config.resolved = resolve_pure(result["config"].as<std::string>(), world_size, false);
  } else {
    const zrt::config::TrainingArguments training = zrt::config::parse_training_arguments(result);
    zrt::config::TrainerConfigOptions opts;
    opts.world_size = world_size;
    opts.num_training_steps = plan.steps;
    // Hidden-size "auto" keys do not affect the schedule; any value lets them resolve.
    opts.model.hidden_size = 1;
    config = zrt::config::prepare_trainer_config(training, opts);
    if (config.plan && config.plan->hf_scheduler) spec = *config.plan->hf_scheduler;
    if (config.plan && config.plan->hf_optimizer) optimizer = &*config.plan->hf_optimizer;
  }
  const zrt::config::ResolvedConfig& rc = config.resolved;
  if (rc.scheduler) spec = rc.scheduler;
  if (rc.optimizer) optimizer = &*rc.optimizer;
  if (!spec) {
    throw zrt::ConfigError(
        "the config defines no learning-rate schedule (DeepSpeed keeps the optimizer's lr)");
  }
  if (!optimizer) throw zrt::ConfigError("the config defines no optimizer, so there is no base lr");
  plan.spec = *spec;
  plan.has_betas = optimizer->kind != zrt::optim::OptimizerKind::kSgd;
  plan.base_lr = plan.has_betas ? optimizer->adam.lr : optimizer->sgd.lr;
  return plan;
}

std::string schedule_csv(const SchedulePlan& plan) {
  std::ostringstream csv;
  zrt::sched::write_schedule_csv(csv, plan.spec, {plan.base_lr}, plan.steps, plan.has_betas);
  return csv.str();
}

Json schedule_json(const Args& args) {
  cxxopts::Options options = schedule_options();
  const cxxopts::ParseResult result = parse_options(options, args);
  if (result.count("cases") || result.count("plot")) {
    throw UsageError("--cases and --plot cannot be used in a case");
  }
  return {{"csv", schedule_csv(schedule_plan(result))}};
}

// zrt-config schedule: the learning rate of every optimizer step as CSV (and optionally a plot).
int run_schedule(const Args& args) {
  cxxopts::Options options = schedule_options();
  cxxopts::ParseResult result = parse_options(options, args);
  if (result.count("help")) {
    std::printf("%s", options.help().c_str());
    return 0;
  }
  reject_cases_with_others(result);
  if (result.count("cases")) return run_cases(result["cases"].as<std::string>(), schedule_json);
  const SchedulePlan plan = schedule_plan(result);
  const std::string csv = schedule_csv(plan);
  std::fwrite(csv.data(), 1, csv.size(), stdout);
  if (result.count("plot")) {
    const std::string path = result["plot"].as<std::string>();
    zrt::report::write_schedule_svg(path, plan.spec, {plan.base_lr}, plan.steps, "", plan.has_betas);
    std::fprintf(stderr, "zrt-config: wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zrt::run_subcommand_tool("zrt-config", argc, argv,
                                  {{"resolve", run_resolve}, {"schedule", run_schedule}}, kUsage);
}
