// The Trainer under mpirun: DistributedSampler semantics, logging, evaluation, checkpoint
// rotation (save_total_limit), the csv monitor files, prediction order, and resume from "last".
#include "hf/trainer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/training_args.h"
#include "core/error.h"
#include "core/json.h"
#include "optim/optimizer.h"
#include "runtime/engine.h"
#include "hf/sampler.h"
#include "tests/support/mpi_world.h"
#include "tests/support/python.h"
#include "tests/support/tiny_model.h"

namespace zrt {
namespace {
namespace fs = std::filesystem;

std::shared_ptr<comm::Comm> world_ptr() {
  return std::shared_ptr<comm::Comm>(&test::world(), [](comm::Comm*) {});
}

class TinyData : public Dataset {
 public:
  explicit TinyData(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  std::pair<at::Tensor, at::Tensor> get(int64_t i) const override {
    return {torch::arange(5, torch::kFloat).mul(0.1f * (i % 13) + 0.05f).cos(),
            torch::arange(3, torch::kFloat).mul(0.2f * (i % 7)).sin()};
  }

 private:
  int64_t n_;
};

std::string write_config(const std::string& dir) {
  const std::string path = dir + "/ds.json";
  if (test::world().rank() == 0) {
    std::ofstream(path) << R"({
      "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "train_batch_size": "auto", "gradient_clipping": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
      "zero_optimization": {"stage": 2},
      "csv_monitor": {"enabled": true, "output_path": ")" +
                               dir + R"(/csv", "job_name": "job"}})";
  }
  test::world().barrier();
  return path;
}

// The Trainer on the test world, without a progress bar.
TrainerOptions quiet_options() {
  TrainerOptions opts;
  opts.comm = world_ptr();
  opts.progress_bar = false;
  return opts;
}

// Arguments shared by the Trainer tests: the stage-2 config of write_config, output in dir/out.
config::TrainingArguments tiny_args(const std::string& dir) {
  config::TrainingArguments args;
  args.deepspeed = write_config(dir);
  args.output_dir = dir + "/out";
  args.per_device_train_batch_size = 2;
  args.learning_rate = 0.01;
  return args;
}

at::Tensor tiny_mse(torch::nn::Module& m, const at::Tensor& x, const at::Tensor& y) {
  return torch::mse_loss(static_cast<test::TinyMlpImpl&>(m).forward(x), y);
}

TEST(DistributedSampler, MatchesTorchSemantics) {
  // Without shuffling: rank r takes r, r + W, ...; padded by repeating from the start.
  DistributedSampler s(10, 4, 1, false, 0, false);
  EXPECT_EQ(s.num_samples(), 3);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{1, 5, 9}));
  DistributedSampler last(10, 4, 3, false, 0, false);
  EXPECT_EQ(last.indices(), (std::vector<int64_t>{3, 7, 1}));  // 11 → 1 (padding)
  DistributedSampler dropped(10, 4, 3, false, 0, true);
  EXPECT_EQ(dropped.num_samples(), 2);
  EXPECT_EQ(dropped.indices(), (std::vector<int64_t>{3, 7}));
  // Shuffled: every index exactly once over the ranks, a different order per epoch.
  std::set<int64_t> seen;
  std::vector<int64_t> first;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler sh(12, 3, r, true, 42, false);
    for (int64_t i : sh.indices()) seen.insert(i);
    if (r == 0) first = sh.indices();
  }
  EXPECT_EQ(seen.size(), 12u);
  DistributedSampler next(12, 3, 0, true, 42, false);
  next.set_epoch(1);
  EXPECT_NE(next.indices(), first);
}

// The HF Trainer's order against accelerate's own SeedableRandomSampler + BatchSamplerShard
// (what transformers' Trainer draws through), short rounds and degenerate sizes included.
TEST(DistributedSampler, HfTrainerOrderIsAcceleratesBatchSamplerShard) {
  if (test::world().size() != 1) GTEST_SKIP() << "a single-process check: run at world size 1";
  ZRT_REQUIRE_PYTHON("accelerate");
  const auto r = test::run_python(R"(
import json
from torch.utils.data import BatchSampler, SequentialSampler
from accelerate.data_loader import SeedableRandomSampler, BatchSamplerShard
for n in (1, 5, 7, 8, 12, 13, 30):
    for world in (1, 2, 3):
        for batch in (1, 2, 4):
            for drop in (False, True):
                for shuffle, epoch in ((False, 0), (True, 0), (True, 3)):
                    for rank in range(world):
                        if shuffle:
                            s = SeedableRandomSampler(range(n), data_seed=42)
                            s.set_epoch(epoch)
                        else:
                            s = SequentialSampler(range(n))
                        shard = BatchSamplerShard(BatchSampler(s, batch, drop), num_processes=world,
                                                  process_index=rank, split_batches=False,
                                                  even_batches=True)
                        flat = [i for b in shard for i in b]
                        print(json.dumps([n, world, batch, drop, shuffle, epoch, rank, flat]))
)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  int cases = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '[') continue;
    const Json c = Json::parse(line);
    DistributedSampler s = DistributedSampler::hf_trainer(
        c[0].get<int64_t>(), c[1].get<int>(), c[6].get<int>(), c[4].get<bool>(), 42,
        c[3].get<bool>(), c[2].get<int64_t>());
    s.set_epoch(c[5].get<int64_t>());
    const auto expected = c[7].get<std::vector<int64_t>>();
    EXPECT_EQ(s.indices(), expected) << line;
    EXPECT_EQ(s.num_samples(), static_cast<int64_t>(expected.size())) << line;
    ++cases;
  }
  EXPECT_EQ(cases, 7 * (1 + 2 + 3) * 3 * 2 * 3) << r.output;
}

// Weights and Adam moments of two Trainers, bit for bit (a resumed job against a straight one).
void expect_same_training_state(torch::nn::Module& model_a, Trainer& a, torch::nn::Module& model_b,
                                Trainer& b, int64_t steps) {
  const auto pa = model_a.named_parameters();
  const auto pb = model_b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].value().equal(pb[i].value())) << pa[i].key() << " differs after the resume";
  }
  const optim::OptimizerState sa = a.engine().optimizer()->state_dict();
  const optim::OptimizerState sb = b.engine().optimizer()->state_dict();
  ASSERT_EQ(sa.state.size(), sb.state.size());
  ASSERT_FALSE(sa.state.empty());
  for (const auto& [index, psa] : sa.state) {
    const optim::ParamState& psb = sb.state.at(index);
    EXPECT_EQ(psa.step, psb.step) << "param " << index;
    EXPECT_TRUE(psa.exp_avg.equal(psb.exp_avg)) << "exp_avg of param " << index;
    EXPECT_TRUE(psa.exp_avg_sq.equal(psb.exp_avg_sq)) << "exp_avg_sq of param " << index;
  }
  EXPECT_EQ(sa.state.begin()->second.step, steps);
}

// The checkpoint-12 trainer_state.json of LogsEvaluatesRotatesMonitorsAndResumes: transformers'
// keys, the first job's logging_steps and save_steps (not the resumed job's 3 and 3), and the log
// history of the first job (steps 5 and 10) continued after the resume.
void expect_state_json_continued(const std::string& path) {
  std::ifstream in(path);
  const Json state = Json::parse(in);
  EXPECT_EQ(state["global_step"], 12);
  EXPECT_TRUE(state["epoch"].is_number_float());
  for (const char* key : {"best_metric", "best_model_checkpoint", "logging_steps", "eval_steps",
                          "save_steps", "train_batch_size", "total_flos", "num_train_epochs",
                          "max_steps", "stateful_callbacks", "best_global_step"}) {
    EXPECT_TRUE(state.contains(key)) << key;
  }
  EXPECT_EQ(state["logging_steps"], 5);
  EXPECT_EQ(state["save_steps"], 2);
  EXPECT_EQ(state["train_batch_size"], 2);
  EXPECT_GT(state["total_flos"].get<double>(), 0);
  std::vector<int64_t> loss_steps;
  for (const Json& e : state["log_history"]) {
    if (e.contains("loss")) {
      loss_steps.push_back(e["step"]);
      EXPECT_TRUE(e.contains("grad_norm")) << e.dump();
      EXPECT_TRUE(e.contains("learning_rate")) << e.dump();
    }
  }
  // Steps 5 and 10 were logged by the first job, before the resume from checkpoint-10.
  EXPECT_EQ(loss_steps, (std::vector<int64_t>{5, 10})) << state["log_history"].dump();
}

// The CSV monitor's per-step train loss, the loss curve and the last checkpoint's state.
void expect_monitors_written(const std::string& dir, const std::string& output_dir,
                             const std::string& last_checkpoint) {
  std::ifstream csv(dir + "/csv/job/Train_Samples_train_loss.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "step,train_loss");
  int rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  EXPECT_EQ(rows, 10);
  EXPECT_TRUE(fs::exists(output_dir + "/training_loss.svg"));
  EXPECT_TRUE(fs::exists(last_checkpoint + "/trainer_state.json"));
}

TEST(Trainer, LogsEvaluatesRotatesMonitorsAndResumes) {
  const std::string dir = test::shared_temp_dir(test::world(), "trainer_run");
  config::TrainingArguments args = tiny_args(dir);
  args.gradient_accumulation_steps = 2;
  args.max_steps = 10;
  args.logging_steps = 5;
  args.save_steps = 2;
  args.save_total_limit = 2;
  args.eval_strategy = "steps";
  args.eval_steps = 5;
  // A schedule that does not depend on max_steps, so that the resumed job below (max_steps 12)
  // can be held to one that ran 12 steps straight; its warmup state crosses the resume.
  args.lr_scheduler_type = "constant_with_warmup";
  args.warmup_steps = 3;
  const TrainerOptions opts = quiet_options();
  const LossFn loss_fn = tiny_mse;
  auto model = std::make_shared<test::TinyMlpImpl>(false);
  Trainer trainer(model, args, std::make_shared<TinyData>(64), std::make_shared<TinyData>(20),
                  loss_fn, opts);
  const TrainOutput out = trainer.train();
  EXPECT_EQ(out.global_step, 10);
  int losses = 0, evals = 0;
  for (const LogEntry& e : out.log_history) {
    losses += e.loss.has_value();
    evals += e.eval_loss.has_value();
  }
  EXPECT_EQ(losses, 2);  // steps 5 and 10
  EXPECT_EQ(evals, 2);
  ASSERT_FALSE(out.log_history.empty());
  EXPECT_EQ(out.log_history.back().metrics.size(), 5u) << "the train summary entry";
  const auto kept = trainer.checkpoints();
  ASSERT_EQ(kept.size(), 2u) << "save_total_limit=2";
  EXPECT_EQ(fs::path(kept.back()).filename(), "checkpoint-10");
  EXPECT_EQ(fs::path(kept.front()).filename(), "checkpoint-8");
  if (test::world().rank() == 0) expect_monitors_written(dir, args.output_dir, kept.back());
  // Prediction: every example, in order, equal to a direct forward on the trained weights.
  TinyData data(7);
  auto preds = trainer.predict(data, [](torch::nn::Module& m, const at::Tensor& x) {
    return static_cast<test::TinyMlpImpl&>(m).forward(x);
  });
  if (test::world().rank() == 0) {
    ASSERT_EQ(preds.size(), 7u);
    torch::NoGradGuard no_grad;
    for (int64_t i = 0; i < 7; ++i) {
      EXPECT_TRUE(torch::allclose(preds[i], model->forward(data.get(i).first.unsqueeze(0))[0]));
    }
  }
  // A new job resumes from the last checkpoint and continues to 12 steps; it must end where one
  // job that ran 12 steps without stopping ends: weights and Adam moments bit for bit. Its new
  // logging_steps and save_steps are overridden by the checkpoint's trainer_state.json, as in
  // transformers (so no loss is logged at step 12, and the state keeps 5 and 2).
  args.max_steps = 12;
  args.logging_steps = 3;
  args.save_steps = 3;
  args.resume_from_checkpoint = "last";
  auto model2 = std::make_shared<test::TinyMlpImpl>(false);
  Trainer again(model2, args, std::make_shared<TinyData>(64), std::make_shared<TinyData>(20),
                loss_fn, opts);
  EXPECT_EQ(again.train().global_step, 12);
  config::TrainingArguments straight_args = args;
  straight_args.resume_from_checkpoint.reset();
  straight_args.output_dir = dir + "/straight";
  auto model3 = std::make_shared<test::TinyMlpImpl>(false);
  Trainer straight(model3, straight_args, std::make_shared<TinyData>(64),
                   std::make_shared<TinyData>(20), loss_fn, opts);
  EXPECT_EQ(straight.train().global_step, 12);
  expect_same_training_state(*model2, again, *model3, straight, 12);
  test::world().barrier();
  // trainer_state.json as transformers writes it, its history continued across the resume.
  if (test::world().rank() == 0) {
    expect_state_json_continued(args.output_dir + "/checkpoint-12/trainer_state.json");
    fs::remove_all(dir);
  }
}

// eval/save/logging by epoch, save_strategy "best", load_best_model_at_end, and the rotation
// that keeps the best checkpoint: the HF Trainer's rules.
TEST(Trainer, StrategiesAndBestModel) {
  const std::string dir = test::shared_temp_dir(test::world(), "trainer_strategies");
  config::TrainingArguments args = tiny_args(dir);
  args.per_device_train_batch_size = 4;
  args.learning_rate = 0.02;
  args.num_train_epochs = 3;
  args.eval_strategy = "epoch";
  args.save_strategy = "epoch";
  args.logging_strategy = "epoch";
  args.load_best_model_at_end = true;
  args.save_total_limit = 1;
  const TrainerOptions opts = quiet_options();
  const LossFn loss_fn = tiny_mse;
  auto model = std::make_shared<test::TinyMlpImpl>(false);
  auto train_data = std::make_shared<TinyData>(48);
  Trainer trainer(model, args, train_data, std::make_shared<TinyData>(20), loss_fn, opts);
  const int64_t per_epoch = trainer.num_training_steps() / 3;
  const TrainOutput out = trainer.train();
  std::vector<int64_t> log_steps, eval_steps;
  double best = 1e300;
  int64_t best_step = -1;
  for (const LogEntry& e : out.log_history) {
    if (e.loss) log_steps.push_back(e.step);
    if (e.eval_loss) {
      eval_steps.push_back(e.step);
      if (*e.eval_loss < best) {
        best = *e.eval_loss;
        best_step = e.step;
      }
    }
  }
  const std::vector<int64_t> epochs = {per_epoch, 2 * per_epoch, 3 * per_epoch};
  EXPECT_EQ(log_steps, epochs);
  EXPECT_EQ(eval_steps, epochs);
  // save_total_limit 1 keeps the newest and the best (2 when they differ).
  const auto kept = trainer.checkpoints();
  const std::string best_dir = "checkpoint-" + std::to_string(best_step);
  EXPECT_EQ(fs::path(kept.back()).filename(), "checkpoint-" + std::to_string(3 * per_epoch));
  EXPECT_EQ(kept.size(), best_step == 3 * per_epoch ? 1u : 2u);
  EXPECT_EQ(fs::path(kept.front()).filename(), best_dir);
  // load_best_model_at_end: the model now holds the best checkpoint's weights.
  EXPECT_NEAR(trainer.evaluate(), best, 1e-6 * std::abs(best));
  // save_strategy "best": a checkpoint only when the evaluation found a new best.
  config::TrainingArguments b = args;
  b.output_dir = dir + "/best";
  b.save_strategy = "best";
  b.load_best_model_at_end = false;
  b.save_total_limit.reset();
  auto model2 = std::make_shared<test::TinyMlpImpl>(false);
  Trainer by_best(model2, b, train_data, std::make_shared<TinyData>(20), loss_fn, opts);
  const TrainOutput out2 = by_best.train();
  std::vector<std::string> expected;
  double running = 1e300;
  for (const LogEntry& e : out2.log_history) {
    if (e.eval_loss && *e.eval_loss < running) {
      running = *e.eval_loss;
      expected.push_back(b.output_dir + "/checkpoint-" + std::to_string(e.step));
    }
  }
  EXPECT_EQ(by_best.checkpoints(), expected);
  test::world().barrier();
  if (test::world().rank() == 0) fs::remove_all(dir);
}

// weights_format_of on what Zero3InferenceFromCheckpointEqualsPlainForward saved, and a folder said
// to be a checkpoint that is none refused before anything loads.
template <typename MakeTrainer>
void expect_weights_formats(const std::string& dir, const std::string& checkpoint,
                            const MakeTrainer& make_trainer) {
  // A folder with no weights in any known form is named, with what was looked for; a folder
  // said to be a checkpoint that is none is refused before anything loads.
  EXPECT_EQ(weights_format_of(checkpoint), WeightsFormat::kCheckpoint);
  EXPECT_EQ(weights_format_of(checkpoint + "/global_step4"), WeightsFormat::kCheckpointTag);
  EXPECT_EQ(weights_format_of(dir + "/model.safetensors"), WeightsFormat::kStateDictFile);
  try {
    weights_format_of(dir + "/csv");
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no weights found"), std::string::npos) << e.what();
  }
  {
    Trainer nothing = make_trainer();
    try {
      nothing.load_model_weights(dir + "/csv", WeightsFormat::kCheckpoint, true);
      ADD_FAILURE() << "no error";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("no `latest` file"), std::string::npos) << e.what();
    }
  }
}

// Issue 19: a training checkpoint serves ZeRO-3 inference. Weights trained at stage 2 load, module
// only, into a stage-3 inference engine (no optimizer, no scheduler) from the checkpoint folder,
// the tag folder and a consolidated safetensors file; the predictions equal a plain forward of the
// trained model, bit for bit (one example per forward on both sides). A training engine can take
// the weights on purpose (fine-tuning with a fresh optimizer and step counter).
TEST(Trainer, Zero3InferenceFromCheckpointEqualsPlainForward) {
  const std::string dir = test::shared_temp_dir(test::world(), "trainer_infer");
  config::TrainingArguments args = tiny_args(dir);
  args.per_device_eval_batch_size = 1;
  args.learning_rate = 0.05;
  args.max_steps = 4;
  args.save_steps = 4;
  args.logging_steps = 4;
  const TrainerOptions opts = quiet_options();
  auto forward = [](torch::nn::Module& m, const at::Tensor& x) {
    return static_cast<test::TinyMlpImpl&>(m).forward(x);
  };
  auto loss_fn = [&](torch::nn::Module& m, const at::Tensor& x, const at::Tensor& y) {
    return torch::mse_loss(forward(m, x), y);
  };
  auto trained = std::make_shared<test::TinyMlpImpl>(false);
  Trainer trainer(trained, args, std::make_shared<TinyData>(64), nullptr, loss_fn, opts);
  ASSERT_EQ(trainer.train().global_step, 4);
  ASSERT_TRUE(trainer.engine().save_16bit_model(dir, "model.safetensors"));
  TinyData data(9);
  std::vector<at::Tensor> expected;
  {
    torch::NoGradGuard no_grad;  // stage 2 keeps whole weights on every rank
    for (int64_t i = 0; i < data.size(); ++i) {
      expected.push_back(trained->forward(data.get(i).first.unsqueeze(0))[0].clone());
    }
  }
  const std::string inference_config = dir + "/zero3_inference.json";
  if (test::world().rank() == 0) {
    std::ofstream(inference_config) << R"({"zero_optimization": {"stage": 3},
      "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
      "gradient_accumulation_steps": "auto"})";
  }
  test::world().barrier();
  const std::string checkpoint = args.output_dir + "/checkpoint-4";
  for (const std::string& source :
       {checkpoint, checkpoint + "/global_step4", dir + "/model.safetensors"}) {
    SCOPED_TRACE(source);
    config::TrainingArguments infer_args = args;
    infer_args.deepspeed = inference_config;
    auto fresh = std::make_shared<test::TinyMlpImpl>(false);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : fresh->parameters()) p.zero_();  // nothing right unless the load worked
    }
    Trainer inference(fresh, infer_args, nullptr, nullptr, loss_fn, opts);
    inference.load_model_weights(source, weights_format_of(source), /*inference=*/true);
    EXPECT_EQ(inference.engine().optimizer(), nullptr);
    EXPECT_EQ(inference.engine().lr_scheduler(), nullptr);
    const PredictionOutput out = inference.predict(
        data, forward, [](const at::Tensor& o, const at::Tensor& y) { return torch::mse_loss(o, y); });
    ASSERT_FALSE(out.metrics.empty());
    EXPECT_EQ(out.metrics.front().first, "predict_loss");
    if (test::world().rank() == 0) {
      ASSERT_EQ(out.predictions.size(), expected.size());
      ASSERT_EQ(out.label_ids.size(), expected.size());
      double loss = 0;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_TRUE(torch::equal(out.predictions[i], expected[i])) << "example " << i;
        EXPECT_TRUE(torch::equal(out.label_ids[i], data.get(static_cast<int64_t>(i)).second));
        loss += torch::mse_loss(expected[i], out.label_ids[i]).item<double>();
      }
      EXPECT_NEAR(out.metrics.front().second, loss / expected.size(), 1e-12);
    } else {
      EXPECT_TRUE(out.predictions.empty());
    }
  }
  // Fine-tuning on purpose: weights only into a training engine; its step counter starts at 0.
  {
    auto fresh = std::make_shared<test::TinyMlpImpl>(false);
    config::TrainingArguments tune = args;
    tune.output_dir = dir + "/tune";
    tune.max_steps = 1;
    Trainer tuner(fresh, tune, std::make_shared<TinyData>(64), nullptr, loss_fn, opts);
    tuner.load_model_weights(checkpoint, WeightsFormat::kCheckpoint, /*inference=*/false);
    EXPECT_EQ(tuner.engine().global_steps(), 0);
    {
      torch::NoGradGuard no_grad;
      EXPECT_TRUE(torch::equal(fresh->forward(data.get(0).first.unsqueeze(0))[0], expected[0]));
    }
    EXPECT_EQ(tuner.train().global_step, 1);
  }
  expect_weights_formats(dir, checkpoint, [&] {
    return Trainer(std::make_shared<test::TinyMlpImpl>(false), args, nullptr, nullptr, loss_fn, opts);
  });
  test::world().barrier();
  if (test::world().rank() == 0) fs::remove_all(dir);
}

// Gradient accumulation with a remainder: as transformers' Trainer, an epoch's last optimizer
// step takes the micro-batches left over (checked against transformers' _run_epoch:
// num_batches = remainder for the last update of the epoch), so an epoch of 5 micro-batches with
// gradient_accumulation_steps 2 has 3 steps and the next epoch starts a fresh accumulation.
TEST(Trainer, AccumulationRemainderStepsAtTheEpochEnd) {
  const std::string dir = test::shared_temp_dir(test::world(), "trainer_remainder");
  config::TrainingArguments args = tiny_args(dir);
  args.gradient_accumulation_steps = 2;
  args.num_train_epochs = 2;
  args.save_strategy = "no";
  args.logging_steps = 1;
  const TrainerOptions opts = quiet_options();
  const LossFn loss_fn = tiny_mse;
  const int world = test::world().size();
  // 10 examples per rank: 5 micro-batches of 2 per epoch.
  Trainer trainer(std::make_shared<test::TinyMlpImpl>(false), args,
                  std::make_shared<TinyData>(10 * world), nullptr, loss_fn, opts);
  EXPECT_EQ(trainer.num_training_steps(), 6);
  const TrainOutput out = trainer.train();
  EXPECT_EQ(out.global_step, 6);
  std::vector<double> epochs;
  for (const LogEntry& e : out.log_history) {
    if (e.loss) epochs.push_back(std::round(e.epoch * 10) / 10);
  }
  // Steps end at micro-batches 2, 4, 5 of each epoch.
  EXPECT_EQ(epochs, (std::vector<double>{0.4, 0.8, 1.0, 1.4, 1.8, 2.0}));
  EXPECT_EQ(trainer.engine().micro_steps(), 10);
  test::world().barrier();
  if (test::world().rank() == 0) fs::remove_all(dir);
}

// Weight decay groups as transformers + DeepSpeed choose them: with an "optimizer" section in
// the config, transformers hands DeepSpeed every parameter in one group (accelerate's
// DummyOptim), so biases decay too; without one, HF's create_optimizer exempts biases and norms.
// A zero gradient leaves only the decay: p <- p (1 - lr wd) where it applies, p where not.
TEST(Trainer, WeightDecayOfBiasesFollowsWhoBuildsTheOptimizer) {
  const std::string dir = test::shared_temp_dir(test::world(), "trainer_decay");
  const std::string hf_config = dir + "/hf_optimizer.json";
  if (test::world().rank() == 0) {
    std::ofstream(hf_config) << R"({"train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
      "zero_optimization": {"stage": 2}})";
  }
  test::world().barrier();
  for (const bool config_optimizer : {true, false}) {
    config::TrainingArguments args = tiny_args(dir);
    if (!config_optimizer) args.deepspeed = hf_config;
    args.weight_decay = 0.1;
    args.max_steps = 1;
    auto model = std::make_shared<test::TinyMlpImpl>(false);
    const at::Tensor bias0 = model->fc1->bias.detach().clone();
    const at::Tensor weight0 = model->fc1->weight.detach().clone();
    Trainer trainer(model, args, std::make_shared<TinyData>(8), nullptr, tiny_mse,
                    quiet_options());
    Engine& engine = trainer.engine();
    auto [x, y] = TinyData(8).get(0);
    engine.backward(model->forward(x.unsqueeze(0)).sum() * 0.0);  // zero gradients
    engine.step();
    // Stage 2: the module holds the parameters whole (looked up by name, as the engine sees them).
    const at::Tensor bias = model->named_parameters()["fc1.bias"].detach();
    const at::Tensor weight = model->named_parameters()["fc1.weight"].detach();
    const double keep = 1.0 - 0.01 * 0.1;  // lr 0.01 (tiny_args), weight decay 0.1
    EXPECT_TRUE(at::allclose(weight, weight0 * keep, 1e-6, 1e-7)) << "config optimizer "
                                                                   << config_optimizer;
    EXPECT_TRUE(at::allclose(bias, config_optimizer ? bias0 * keep : bias0, 1e-6, 1e-7))
        << "fc1.bias with the config's optimizer: " << config_optimizer
        << "; change from the initial bias: " << (bias - bias0).abs().max().item<double>();
  }
  test::world().barrier();
  if (test::world().rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace zrt
