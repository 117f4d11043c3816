#include "runtime/fault_injection.h"

#include <charconv>
#include <csignal>
#include <cstdio>
#include <sstream>
#include <string>

#include "core/env.h"
#include "core/error.h"

namespace zrt::runtime {
namespace {

[[noreturn]] void die(const char* where) {
  std::fprintf(stderr, "[zrt fault injection] SIGKILL %s\n", where);
  std::fflush(stderr);
  std::raise(SIGKILL);
  std::abort();
}

class KillingStorage;

class KillingFile final : public ckpt::WritableFile {
 public:
  KillingFile(std::unique_ptr<ckpt::WritableFile> inner, KillingStorage* owner)
      : inner_(std::move(inner)), owner_(owner) {}
  void write(const void* data, size_t size) override;
  void sync() override;
  void close() override { inner_->close(); }

 private:
  std::unique_ptr<ckpt::WritableFile> inner_;
  KillingStorage* owner_;
};

class KillingStorage final : public ckpt::Storage {
 public:
  KillingStorage(std::shared_ptr<ckpt::Storage> inner, int64_t kill_at)
      : inner_(std::move(inner)), kill_at_(kill_at) {}
  void tick(const char* op) {
    if (++count_ == kill_at_) die(op);
  }
  std::unique_ptr<ckpt::WritableFile> create(const std::string& path) override {
    tick("in checkpoint create");
    return std::make_unique<KillingFile>(inner_->create(path), this);
  }
  void rename(const std::string& from, const std::string& to) override {
    tick("in checkpoint rename");
    inner_->rename(from, to);
  }
  void sync_dir(const std::string& dir) override {
    tick("in checkpoint directory sync");
    inner_->sync_dir(dir);
  }
  void make_dirs(const std::string& dir) override { inner_->make_dirs(dir); }
  bool remove(const std::string& path) override { return inner_->remove(path); }
  std::vector<std::string> list(const std::string& dir) override { return inner_->list(dir); }
  bool exists(const std::string& path) override { return inner_->exists(path); }
  bool is_dir(const std::string& path) override { return inner_->is_dir(path); }
  std::unique_ptr<ckpt::ByteSource> open(const std::string& path) override {
    return inner_->open(path);
  }

 private:
  std::shared_ptr<ckpt::Storage> inner_;
  int64_t kill_at_;
  int64_t count_ = 0;
};

void KillingFile::write(const void* data, size_t size) {
  owner_->tick("in checkpoint write");
  inner_->write(data, size);
}

void KillingFile::sync() {
  owner_->tick("in checkpoint file sync");
  inner_->sync();
}

}  // namespace

std::optional<FaultPlan> fault_plan_from_env() {
  const auto text = env::get_string("ZRT_FAULT_INJECT");
  if (!text) return std::nullopt;
  std::stringstream ss(*text);
  std::string kind;
  std::getline(ss, kind, ':');
  FaultPlan plan;
  if (kind == "kill_in_save") {
    plan.kind = FaultPlan::Kind::kKillInSave;
  } else if (kind == "kill_at_step") {
    plan.kind = FaultPlan::Kind::kKillAtStep;
  } else {
    throw ConfigError(str("ZRT_FAULT_INJECT='", *text, "': unknown fault '", kind, "'"));
  }
  for (std::string field; std::getline(ss, field, ':');) {
    const auto eq = field.find('=');
    ZRT_CHECK_AS(ConfigError, eq != std::string::npos, "ZRT_FAULT_INJECT: bad field '", field, "'");
    const std::string key = field.substr(0, eq);
    const std::string text_value = field.substr(eq + 1);
    int64_t value = 0;
    const auto [end, ec] =
        std::from_chars(text_value.data(), text_value.data() + text_value.size(), value);
    ZRT_CHECK_AS(ConfigError, ec == std::errc() && end == text_value.data() + text_value.size(),
                 "ZRT_FAULT_INJECT: field '", field, "' needs an integer value");
    if (key == "rank") {
      plan.rank = static_cast<int>(value);
    } else if (key == "op" || key == "step") {
      plan.at = value;
    } else {
      throw ConfigError(str("ZRT_FAULT_INJECT: unknown field '", key, "'"));
    }
  }
  return plan;
}

std::shared_ptr<ckpt::Storage> maybe_kill_in_save(std::shared_ptr<ckpt::Storage> inner, int rank) {
  const auto plan = fault_plan_from_env();
  if (!plan || plan->kind != FaultPlan::Kind::kKillInSave || plan->rank != rank) return inner;
  return std::make_shared<KillingStorage>(std::move(inner), plan->at);
}

void maybe_kill_at_step(int rank, int64_t global_step) {
  static const std::optional<FaultPlan> plan = fault_plan_from_env();
  if (plan && plan->kind == FaultPlan::Kind::kKillAtStep && plan->rank == rank &&
      plan->at == global_step) {
    die("in backward");
  }
}

}  // namespace zrt::runtime
