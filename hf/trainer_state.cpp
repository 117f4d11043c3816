// The Trainer's record of a run, as transformers keeps it: log_history entries, trainer_state.json
// (TrainerState's fields; written with each checkpoint, read back on resume), best-model tracking,
// and what report_to sends each log to (stdout, TensorBoard event files, log_history.csv), plus
// save_metrics' {split}_results.json / all_results.json.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/logging.h"
#include "hf/trainer.h"
#include "report/event_file.h"
#include <unistd.h>

namespace zrt {
namespace fs = std::filesystem;

namespace {

std::string format_entry(const LogEntry& e) {
  std::string s = "{";
  auto add = [&s](const std::string& k, double v) {
    s += str(s.size() > 1 ? ", " : "", "'", k, "': ", v);
  };
  if (e.loss) add("loss", *e.loss);
  if (e.grad_norm) add("grad_norm", *e.grad_norm);
  if (e.learning_rate) add("learning_rate", *e.learning_rate);
  if (e.eval_loss) add("eval_loss", *e.eval_loss);
  for (const auto& [k, v] : e.metrics) add(k, v);
  add("epoch", std::round(e.epoch * 100) / 100);
  add("step", static_cast<double>(e.step));
  return s + "}";
}

// log_history entries as transformers writes them.
Json entry_to_json(const LogEntry& e) {
  Json j = {{"step", e.step}, {"epoch", e.epoch}};
  if (e.loss) j["loss"] = *e.loss;
  if (e.grad_norm) j["grad_norm"] = *e.grad_norm;
  if (e.learning_rate) j["learning_rate"] = *e.learning_rate;
  if (e.eval_loss) j["eval_loss"] = *e.eval_loss;
  for (const auto& [k, v] : e.metrics) j[k] = v;
  return j;
}

LogEntry entry_from_json(const Json& j) {
  LogEntry e;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_number()) continue;  // HF writes only numbers here; anything else is not ours
    const double d = v.get<double>();
    if (k == "step") {
      e.step = v.get<int64_t>();
    } else if (k == "epoch") {
      e.epoch = d;
    } else if (k == "loss") {
      e.loss = d;
    } else if (k == "grad_norm") {
      e.grad_norm = d;
    } else if (k == "learning_rate") {
      e.learning_rate = d;
    } else if (k == "eval_loss") {
      e.eval_loss = d;
    } else {
      e.metrics.emplace_back(k, d);
    }
  }
  return e;
}

// An absolute step interval as TrainerState records it (a ratio times the total steps).
int64_t state_steps(double steps, int64_t total) {
  return steps < 1 ? static_cast<int64_t>(std::ceil(steps * total)) : static_cast<int64_t>(steps);
}

void write_json_atomic(const fs::path& path, const Json& j, int indent) {
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(indent) << "\n";
    out.flush();
    ZRT_CHECK(out.good(), "cannot write ", tmp);
  }
  fs::rename(tmp, path);
}

// HF's default_logdir(): runs/<Mon DD_HH-MM-SS>_<host>.
std::string default_run_name() {
  char stamp[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%b%d_%H-%M-%S", std::localtime(&now));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  return str(stamp, "_", host);
}

}  // namespace

void Trainer::save_state(const std::string& dir_arg) const {
  if (comm_->rank() != 0) return;
  const std::string dir = dir_arg.empty() ? args_.output_dir : dir_arg;
  const int64_t total = num_training_steps();
  Json history = Json::array();
  for (const LogEntry& e : log_history_) history.push_back(entry_to_json(e));
  const int64_t ga = std::max<int64_t>(1, args_.gradient_accumulation_steps);
  const int64_t per_epoch =
      std::max<int64_t>(1, ((train_ ? batches_per_epoch() : 1) + ga - 1) / ga);
  const int64_t epochs = args_.max_steps > 0
                             ? args_.max_steps / per_epoch + (args_.max_steps % per_epoch > 0)
                             : static_cast<int64_t>(std::ceil(args_.num_train_epochs));
  auto opt = [](const auto& v) { return v ? Json(*v) : Json(nullptr); };
  const bool done = engine_ && engine_->global_steps() >= total;
  // Every field of transformers' TrainerState (5.24), as its save_to_json writes them.
  const Json state = {
      {"best_global_step", opt(best_global_step_)},
      {"best_metric", opt(best_metric_)},
      {"best_model_checkpoint", opt(best_model_checkpoint_)},
      {"epoch", epoch_},
      // Unset eval_steps leaves TrainerState's default, as transformers does.
      {"eval_steps", resumed_steps_.eval   ? *resumed_steps_.eval
                     : args_.eval_steps ? state_steps(*args_.eval_steps, total)
                                        : int64_t{500}},
      {"global_step", engine_ ? engine_->global_steps() : 0},
      {"is_hyper_param_search", false},
      {"is_local_process_zero", true},
      {"is_world_process_zero", true},
      {"log_history", history},
      {"logging_steps", resumed_steps_.logging.value_or(state_steps(args_.logging_steps, total))},
      {"max_steps", total},
      {"num_input_tokens_seen", 0},
      {"num_train_epochs", epochs},
      {"save_steps", resumed_steps_.save.value_or(state_steps(args_.save_steps, total))},
      {"stateful_callbacks",
       {{"TrainerControl",
         {{"args",
           {{"should_epoch_stop", false},
            {"should_evaluate", false},
            {"should_log", false},
            {"should_save", true},
            {"should_training_stop", done}}},
          {"attributes", Json::object()}}}}},
      {"total_flos", total_flos_},
      {"train_batch_size", args_.per_device_train_batch_size},
      {"trial_name", nullptr},
      {"trial_params", nullptr}};
  std::error_code ec;
  fs::create_directories(dir, ec);
  write_json_atomic(fs::path(dir) / "trainer_state.json", state, 2);
}

void Trainer::restore_state(const std::string& checkpoint) {
  const fs::path path = fs::path(checkpoint) / "trainer_state.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  Json state;
  try {
    std::ifstream in(path);
    state = Json::parse(in);
  } catch (const Json::exception& e) {
    throw CheckpointError(str(path.string(), ": not valid JSON: ", e.what()));
  }
  ZRT_CHECK_AS(CheckpointError, state.is_object(), path.string(), ": not a JSON object");
  try {
    log_history_.clear();
    for (const Json& e : state.value("log_history", Json::array())) {
      if (e.is_object()) log_history_.push_back(entry_from_json(e));
    }
    auto number = [&](const char* key) -> std::optional<double> {
      const auto it = state.find(key);
      if (it == state.end() || it->is_null()) return std::nullopt;
      return it->get<double>();
    };
    best_metric_ = number("best_metric");
    if (auto s = number("best_global_step")) best_global_step_ = static_cast<int64_t>(*s);
    if (state.contains("best_model_checkpoint") && state["best_model_checkpoint"].is_string()) {
      best_model_checkpoint_ = state["best_model_checkpoint"].get<std::string>();
    }
    total_flos_ = number("total_flos").value_or(0);
    epoch_ = number("epoch").value_or(0);
  } catch (const Json::exception& e) {
    throw CheckpointError(str(path.string(), ": ", e.what()));
  }
  // transformers' compare_trainer_and_checkpoint_args: a warning when these changed; the
  // checkpoint's values are the ones used from here on (its loaded TrainerState).
  const auto state_int = [&](const char* key) -> std::optional<int64_t> {
    const auto it = state.find(key);
    if (it == state.end() || !it->is_number()) return std::nullopt;
    return static_cast<int64_t>(it->get<double>());
  };
  resumed_steps_ = {state_int("logging_steps"), state_int("eval_steps"), state_int("save_steps")};
  const auto py_number = [](double v) {  // as Python prints an int or a float argument
    return v == std::floor(v) && std::abs(v) < 1e15 ? str(static_cast<int64_t>(v)) : str(v);
  };
  std::string mismatches;
  const std::tuple<const char*, std::optional<double>, std::optional<int64_t>> steps[] = {
      {"logging_steps", args_.logging_steps, resumed_steps_.logging},
      {"eval_steps", args_.eval_steps, resumed_steps_.eval},
      {"save_steps", args_.save_steps, resumed_steps_.save}};
  for (const auto& [key, arg, saved] : steps) {
    if (arg && saved && *arg != static_cast<double>(*saved)) {
      mismatches += str("\n\t", key, ": ", py_number(*arg), " (from args) != ", *saved,
                        " (from trainer_state.json)");
    }
  }
  if (auto bs = state_int("train_batch_size"); bs && *bs != args_.per_device_train_batch_size) {
    mismatches += str("\n\tper_device_train_batch_size: ", args_.per_device_train_batch_size,
                      " (from args) != ", *bs, " (from trainer_state.json)");
  }
  if (!mismatches.empty()) {
    ZRT_LOG_WARN("Warning: The following arguments do not match the ones in the "
                 "`trainer_state.json` within the checkpoint directory: ",
                 mismatches);
  }
}

bool Trainer::track_best(const LogEntry& eval_entry) {
  const std::optional<std::string> key = args_.best_metric_key();
  if (!key || !eval_entry.eval_loss) return false;
  const double value = *eval_entry.eval_loss;  // key is eval_loss (checked in train())
  const bool greater = args_.greater_is_better.value_or(false);
  const bool better = !best_metric_ || (greater ? value > *best_metric_ : value < *best_metric_);
  if (better) {
    best_metric_ = value;
    best_global_step_ = eval_entry.step;
  }
  return better;
}

void Trainer::report(const LogEntry& e) {
  log_history_.push_back(e);
  if (comm_->rank() != 0) return;
  std::printf("%s\n", format_entry(e).c_str());
  std::fflush(stdout);
  const auto& to = args_.report_to;
  if (std::find(to.begin(), to.end(), "tensorboard") != to.end()) {
    if (!tensorboard_) {
      tensorboard_ = std::make_unique<EventFileWriter>(
          (fs::path(args_.output_dir) / "runs" / args_.run_name.value_or(default_run_name()))
              .string());
    }
    // transformers' rewrite_logs: eval_* -> eval/*, everything else -> train/*.
    const Json logs = entry_to_json(e);
    for (const auto& [k, v] : logs.items()) {
      if (k == "step" || !v.is_number()) continue;
      const std::string tag = k.rfind("eval_", 0) == 0 ? "eval/" + k.substr(5) : "train/" + k;
      tensorboard_->add_scalar(tag, v.get<double>(), e.step);
    }
    tensorboard_->flush();
  }
  if (std::find(to.begin(), to.end(), "csv") != to.end()) {
    const fs::path path = fs::path(args_.output_dir) / "log_history.csv";
    std::error_code ec;
    const bool fresh = !fs::exists(path, ec);
    fs::create_directories(args_.output_dir, ec);
    std::ofstream out(path, std::ios::app);
    if (fresh) out << "step,epoch,loss,grad_norm,learning_rate,eval_loss\n";
    auto cell = [](const std::optional<double>& v) { return v ? str(*v) : std::string(); };
    out << e.step << "," << e.epoch << "," << cell(e.loss) << "," << cell(e.grad_norm) << ","
        << cell(e.learning_rate) << "," << cell(e.eval_loss) << "\n";
    ZRT_CHECK(out.good(), "cannot write ", path.string());
  }
}

void Trainer::save_metrics(const std::string& split,
                           const std::vector<std::pair<std::string, double>>& metrics) const {
  if (comm_->rank() != 0) return;
  Json mine = Json::object();
  for (const auto& [k, v] : metrics) mine[k] = v;
  std::error_code ec;
  fs::create_directories(args_.output_dir, ec);
  write_json_atomic(fs::path(args_.output_dir) / (split + "_results.json"), mine, 4);
  const fs::path all_path = fs::path(args_.output_dir) / "all_results.json";
  Json all = Json::object();
  if (fs::exists(all_path, ec)) {
    try {
      std::ifstream in(all_path);
      all = Json::parse(in);
    } catch (const Json::exception&) {
      all = Json::object();
    }
    if (!all.is_object()) all = Json::object();
  }
  all.update(mine);
  write_json_atomic(all_path, all, 4);
}

}  // namespace zrt
