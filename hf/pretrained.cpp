#include "hf/pretrained.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>

#include <ATen/CPUGeneratorImpl.h>

#include "checkpoint/hf_weights.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shard.h"
#include "runtime/engine.h"
#include "runtime/model_states.h"
#include "zero/stage3_layout.h"
#include <dirent.h>

namespace zrt {
namespace {

// config.json says the dtype the weights are saved in, as transformers' save_pretrained writes it
// ("dtype"; "torch_dtype" too when the source config had that older key).
Json config_with_dtype(Json config, at::ScalarType dtype) {
  if (!config.is_object()) return config;
  const std::string name = dtype == at::kBFloat16 ? "bfloat16"
                           : dtype == at::kHalf   ? "float16"
                                                  : "float32";
  config["dtype"] = name;
  if (config.contains("torch_dtype")) config["torch_dtype"] = name;
  return config;
}

using Shape = std::vector<int64_t>;

struct Expected {
  Shape shape;
  at::ScalarType dtype;
};

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// "\n  <what>: 'a', 'b', ... (and N more)" with at most 20 names; empty for no names.
std::string name_list(const char* what, const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string out = str("\n  ", what, " (", names.size(), "): ");
  for (size_t i = 0; i < names.size() && i < 20; ++i) out += str(i ? ", " : "", names[i]);
  if (names.size() > 20) out += str(", ... (and ", names.size() - 20, " more)");
  return out;
}

// Every rank learns whether any rank failed; the failed ranks rethrow their own error, the others
// throw one that says where to look.
void vote(comm::Comm& comm, const std::exception_ptr& failure, const std::string& what) {
  at::Tensor flag = at::full({1}, failure ? 1 : 0, at::kByte);
  comm.all_reduce(flag, comm::ReduceOp::kMax);
  if (failure) std::rethrow_exception(failure);
  ZRT_CHECK_AS(CheckpointError, flag.item<uint8_t>() == 0, what,
               ": another rank failed (its error names the problem)");
}

}  // namespace

namespace {

// What the model expects by name: the partitioned parameters, then what every rank keeps whole
// (frozen parameters, buffers), which `whole` lists.
std::map<std::string, Expected> expected_tensors(
    Engine& engine, const std::vector<runtime::GroupPartition>& groups,
    const std::set<std::string>& aliases, std::vector<std::pair<std::string, at::Tensor>>* whole) {
  std::map<std::string, Expected> expected;
  for (const runtime::GroupPartition& g : groups) {
    for (const auto& [name, shape] : g.params) expected[name] = {shape, engine.model_dtype()};
  }
  auto add_whole = [&](const std::string& name, const at::Tensor& t) {
    if (expected.count(name) != 0 || aliases.count(name) != 0) return;
    expected[name] = {t.sizes().vec(), t.scalar_type()};
    whole->emplace_back(name, t);
  };
  for (const auto& p : engine.module().named_parameters()) add_whole(p.key(), p.value());
  for (const auto& b : engine.module().named_buffers()) add_whole(b.key(), b.value());
  return expected;
}

// The weights under the model's names (PretrainedLoadOptions::rename): model name -> the file's
// tensor; `unmapped` lists the file's names that are no model name.
struct WeightNames {
  std::map<std::string, const ckpt::WeightInfo*> by_model_name;
  std::vector<std::string> unmapped;

  WeightNames(const ckpt::HfWeights& weights,
              const std::function<std::string(const std::string&)>& rename) {
    for (const ckpt::WeightInfo& w : weights.tensors()) {
      const std::string name = rename ? rename(w.name) : w.name;
      if (name.empty()) {
        unmapped.push_back(w.name);
      } else {
        by_model_name[name] = &w;
      }
    }
  }
  const ckpt::WeightInfo* find(const std::string& model_name) const {
    auto it = by_model_name.find(model_name);
    return it == by_model_name.end() ? nullptr : it->second;
  }
};

// Names, shapes and kinds of dtype against the model: missing and unexpected names go to
// `report`; throws one CheckpointError naming every problem.
void check_fit(const ckpt::HfWeights& weights, const WeightNames& names,
               const std::map<std::string, Expected>& expected,
               const std::set<std::string>& aliases, const std::vector<std::string>& ignore,
               bool strict, const std::string& path, PretrainedLoadReport* report) {
  std::vector<std::string> mismatched;
  for (const auto& [name, want] : expected) {
    const ckpt::WeightInfo* w = names.find(name);
    if (w == nullptr) {
      report->missing.push_back(name);
    } else if (w->shape != want.shape) {
      mismatched.push_back(str("'", w->name, "' is ", shape_str(w->shape), " in the weights but ",
                               shape_str(want.shape), " in the model"));
    } else if (c10::isFloatingType(w->dtype) != c10::isFloatingType(want.dtype)) {
      mismatched.push_back(str("'", w->name, "' is ", c10::toString(w->dtype),
                               " in the weights but ", c10::toString(want.dtype), " in the model"));
    }
  }
  std::vector<std::string> others = names.unmapped;
  for (const auto& [name, w] : names.by_model_name) {
    if (expected.count(name) == 0 && aliases.count(name) == 0) others.push_back(w->name);
  }
  for (const std::string& name : others) {
    if (std::find(ignore.begin(), ignore.end(), name) == ignore.end())
      report->unexpected.push_back(name);
  }
  const bool names_fail = strict && (!report->missing.empty() || !report->unexpected.empty());
  if (!mismatched.empty() || names_fail) {
    const std::string where = weights.files().size() == 1 ? weights.files()[0] : path;
    throw CheckpointError(str(where, ": the weights do not fit the model",
                              name_list("missing from the weights", report->missing),
                              name_list("not in the model", report->unexpected),
                              name_list("mismatched", mismatched),
                              names_fail ? "\n  (load with strict = false to skip names)" : ""));
  }
}

}  // namespace

PretrainedLoadReport load_pretrained(Engine& engine, const std::string& path,
                                     const PretrainedLoadOptions& options) {
  at::NoGradGuard no_grad;
  runtime::ModelStates& states = engine.model_states();
  const std::vector<runtime::GroupPartition> groups = states.group_partitions();
  std::set<std::string> aliases;
  for (const auto& [alias, owner] : engine.tied_parameters()) aliases.insert(alias);
  std::vector<std::pair<std::string, at::Tensor>> whole;
  auto expected = expected_tensors(engine, groups, aliases, &whole);
  if (options.only) {
    for (auto it = expected.begin(); it != expected.end();)
      it = options.only(it->first) ? std::next(it) : expected.erase(it);
  }
  const runtime::FrozenPlaces frozen = runtime::frozen_places(states);

  // 1. Index the files and compare with the model; all ranks agree before anything changes.
  std::unique_ptr<ckpt::HfWeights> weights;
  std::unique_ptr<WeightNames> names;
  PretrainedLoadReport report;
  std::exception_ptr failure;
  try {
    weights = std::make_unique<ckpt::HfWeights>(path);
    names = std::make_unique<WeightNames>(*weights, options.rename);
    check_fit(*weights, *names, expected, aliases, options.ignore, options.strict, path, &report);
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  vote(engine.comm(), failure, path);

  // 2. Each rank reads its elements into its fp32 masters, and whatever it keeps whole.
  std::vector<std::pair<at::Tensor, at::Tensor>> whole_values;  // (destination, value)
  try {
    ckpt::RangeReader read = [&](const std::string& name, int64_t, ShardInfo range) {
      const ckpt::WeightInfo* w = names->find(name);
      // Missing (not strict), or not among the names to load: kept as it is.
      if (w == nullptr || expected.count(name) == 0) return at::Tensor();
      return weights->read_range(w->name, range.offset, range.size);
    };
    for (size_t g = 0; g < groups.size(); ++g) {
      const runtime::GroupPartition& gp = groups[g];
      at::Tensor master = runtime::master_values(states, g);
      ckpt::fill_partition(gp.layout, gp.params, gp.rank, gp.world_size, read, master, path);
      runtime::store_master(states, g, master);
    }
    // Frozen parameters under ZeRO-3: this rank's partitions (Note [Frozen parameters under
    // ZeRO-3], zero/stage3_layout.cpp).
    runtime::fill_frozen_partitions(states, read, path);
    for (const auto& [name, t] : whole) {
      const ckpt::WeightInfo* w = names->find(name);
      if (w == nullptr || expected.count(name) == 0 || frozen.count(name) != 0) continue;
      ZRT_INTERNAL_ASSERT(zero::storage_allocated(t), "'", name,
                          "' is neither partitioned nor held");
      whole_values.emplace_back(t, weights->read(w->name));
    }
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  if (failure) runtime::masters_from_params(states);  // undo what the masters took, where possible
  vote(engine.comm(), failure, path);

  // 3. Masters -> parameters everywhere (collective: all-gather / persistent refresh).
  for (auto& [dst, value] : whole_values) dst.detach().copy_(value);
  runtime::params_from_masters(states);
  states.frozen_partitions_written();
  report.bytes_read = weights->bytes_read();
  if (!report.missing.empty() || !report.unexpected.empty()) {
    ZRT_LOG_WARN(path, ": loaded without strict",
                 name_list("missing from the weights (kept as they were)", report.missing),
                 name_list("not in the model (ignored)", report.unexpected));
  }
  ZRT_LOG_INFO("loaded ", weights->tensors().size(), " tensors from ", path, " (",
               report.bytes_read >> 20, " MiB read by this rank)");
  return report;
}

namespace {

// FNV-1a of the name: a seed that is the same in every process and every build.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

void init_deferred(Engine& engine, uint64_t seed, const ParamInit& init) {
  at::NoGradGuard no_grad;
  runtime::ModelStates& states = engine.model_states();
  const std::vector<runtime::GroupPartition> groups = states.group_partitions();
  auto whole = [&](const std::string& name, const Shape& shape) {
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
    at::Generator gen = at::detail::createCPUGenerator(seed ^ name_hash(name));
    init(name, t, gen);
    return t;
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    const runtime::GroupPartition& gp = groups[g];
    std::map<std::string, Shape> shapes(gp.params.begin(), gp.params.end());
    ckpt::RangeReader read = [&](const std::string& name, int64_t, ShardInfo range) {
      return whole(name, shapes.at(name)).reshape({-1}).narrow(0, range.offset, range.size);
    };
    if (gp.layout == ckpt::PartitionLayout::kPerParam) {
      // Parameter by parameter: a swapped master (NVMe offload) is never whole in memory.
      int64_t offset = 0;
      for (const auto& entry : gp.params) {
        const int64_t pn = param_partition_size(ckpt::shape_numel(entry.second), gp.world_size);
        at::Tensor part = at::zeros({pn}, at::TensorOptions().dtype(at::kFloat));
        ckpt::fill_partition(gp.layout, {entry}, gp.rank, gp.world_size, read, part,
                             "init_deferred");
        runtime::store_master(states, g, part, offset);
        offset += pn;
      }
      continue;
    }
    at::Tensor master = runtime::master_values(states, g);
    ckpt::fill_partition(gp.layout, gp.params, gp.rank, gp.world_size, read, master,
                         "init_deferred");
    runtime::store_master(states, g, master);
  }
  std::set<std::string> skip;
  for (const auto& g : groups) {
    for (const auto& entry : g.params) skip.insert(entry.first);
  }
  std::map<std::string, Shape> frozen_shapes;
  for (const auto& g : states.frozen_partitions()) {
    for (const auto& entry : g.params) {
      skip.insert(entry.first);
      frozen_shapes.insert(entry);
    }
  }
  runtime::fill_frozen_partitions(
      states,
      [&](const std::string& name, int64_t, ShardInfo range) {
        const at::Tensor flat = whole(name, frozen_shapes.at(name)).reshape({-1});
        return flat.narrow(0, range.offset, range.size);
      },
      "init_deferred");
  for (const auto& [alias, owner] : engine.tied_parameters()) skip.insert(alias);
  for (const auto& p : engine.module().named_parameters()) {
    if (skip.count(p.key()) != 0) continue;
    ZRT_INTERNAL_ASSERT(zero::storage_allocated(p.value()), "'", p.key(), "' has no storage");
    p.value().detach().copy_(whole(p.key(), p.value().sizes().vec()));
  }
  runtime::params_from_masters(states);
  states.frozen_partitions_written();
}

namespace {

// One tensor to save: whole on every rank (`whole`), or a stage-3 parameter gathered from the
// partitions (read_lp index `group` — an optimizer group or a frozen flat — at `offset`, pn
// elements per rank).
struct SaveItem {
  std::string param;  // the model's name
  std::string name;   // the name it is saved under; empty: not saved
  Shape shape;
  at::Tensor whole;
  int group = -1;
  int64_t offset = 0, pn = 0;
  int64_t nbytes = 0;
};

std::vector<SaveItem> save_items(Engine& engine,
                                 const std::function<std::string(const std::string&)>& rename) {
  std::map<std::string, std::tuple<int, int64_t, int64_t>> partitioned;  // name -> (g, offset, pn)
  const auto groups = engine.model_states().group_partitions();
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].layout != ckpt::PartitionLayout::kPerParam) continue;
    int64_t offset = 0;
    for (const auto& [name, shape] : groups[g].params) {
      const int64_t pn = param_partition_size(ckpt::shape_numel(shape), groups[g].world_size);
      partitioned[name] = {static_cast<int>(g), offset, pn};
      offset += pn;
    }
  }
  const int world = engine.comm().size();
  for (const auto& [name, place] : runtime::frozen_places(engine.model_states())) {
    const at::Tensor& p = engine.module().named_parameters()[name];
    partitioned[name] = {static_cast<int>(place.first), place.second,
                         param_partition_size(p.numel(), world)};
  }
  std::set<std::string> aliases;
  for (const auto& [alias, owner] : engine.tied_parameters()) aliases.insert(alias);
  std::vector<SaveItem> items;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    if (aliases.count(name) != 0) return;
    SaveItem item;
    item.param = name;
    item.name = rename ? rename(name) : name;
    item.shape = t.sizes().vec();
    item.nbytes = t.numel() * static_cast<int64_t>(t.element_size());
    auto it = partitioned.find(name);
    if (it != partitioned.end()) {
      std::tie(item.group, item.offset, item.pn) = it->second;
    } else {
      ZRT_INTERNAL_ASSERT(zero::storage_allocated(t), "'", name,
                          "' is neither partitioned nor held");
      item.whole = t.detach();
    }
    items.push_back(std::move(item));
  };
  for (const auto& p : engine.module().named_parameters()) add(p.key(), p.value());
  for (const auto& b : engine.module().named_buffers()) add(b.key(), b.value());
  return items;
}

// Consecutive saved items per file, as transformers cuts shards: a new file when the next tensor
// would take the current one past the limit.
std::vector<std::vector<size_t>> plan_shards(const std::vector<SaveItem>& items,
                                             int64_t max_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  int64_t size = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].name.empty()) continue;
    if (!shards.back().empty() && size + items[i].nbytes > max_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(i);
    size += items[i].nbytes;
  }
  return shards;
}

// A tensor whole on every rank: held, or gathered from the partitions (collective).
at::Tensor whole_value(Engine& engine, const SaveItem& item) {
  if (item.group < 0) return item.whole;
  const at::Tensor mine =
      engine.model_states().read_lp(static_cast<size_t>(item.group), item.offset, item.pn);
  at::Tensor all = at::empty({item.pn * engine.comm().size()}, mine.options());
  engine.comm().all_gather(all, mine);
  return all.narrow(0, 0, ckpt::shape_numel(item.shape)).view(item.shape);
}

// whole_value by the model's name (SavePretrainedOptions::transform's `whole_of`).
std::function<at::Tensor(const std::string&)> whole_by_name(Engine& engine,
                                                           const std::vector<SaveItem>& items) {
  std::map<std::string, size_t> item_of;
  for (size_t i = 0; i < items.size(); ++i) item_of[items[i].param] = i;
  return [&engine, &items, item_of](const std::string& name) {
    auto it = item_of.find(name);
    ZRT_CHECK(it != item_of.end(), "save_pretrained: the model has no tensor '", name, "'");
    return whole_value(engine, items[it->second]);
  };
}

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

std::string shard_name(size_t i, const std::vector<std::vector<size_t>>& shards) {
  const size_t n = shards.size();
  if (n == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

bool is_weights_file(const std::string& name) {
  if (name == "model.safetensors" || name == "model.safetensors.index.json") return true;
  unsigned a = 0, b = 0;
  int end = 0;
  return std::sscanf(name.c_str(), "model-%5u-of-%5u.safetensors%n", &a, &b, &end) == 2 &&
         static_cast<size_t>(end) == name.size();
}

// Rank 0: deletes weight files of an earlier save that `keep` does not list.
void remove_stale(const std::string& dir, const std::set<std::string>& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (is_weights_file(name) && keep.count(name) == 0) stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : stale) std::remove(ckpt::join_path(dir, name).c_str());
}

}  // namespace

void save_pretrained(Engine& engine, const std::string& dir, const SavePretrainedOptions& options) {
  ZRT_CHECK(options.max_shard_size > 0, "save_pretrained: max_shard_size must be positive");
  at::NoGradGuard no_grad;
  comm::Comm& comm = engine.comm();
  const bool writer = comm.rank() == 0;
  const std::vector<SaveItem> items = save_items(engine, options.rename);
  const std::function<at::Tensor(const std::string&)> whole_of = whole_by_name(engine, items);
  const bool one_file = !options.weights_name.empty();  // never sharded
  auto shards = plan_shards(items, one_file ? kUnlimited : options.max_shard_size);
  if (!options.weights) shards.clear();
  auto file = [&](size_t s) { return one_file ? options.weights_name : shard_name(s, shards); };
  ckpt::PosixStorage storage;
  std::exception_ptr failure;
  try {
    if (writer) storage.make_dirs(dir);
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  vote(comm, failure, dir);
  Json weight_map = Json::object();
  std::set<std::string> written;
  int64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    ckpt::NamedTensors tensors;
    for (size_t i : shards[s]) {
      const SaveItem& item = items[i];
      at::Tensor value = whole_value(engine, item);  // every rank takes part; rank 0 keeps it
      if (options.transform) value = options.transform(item.param, value, whole_of);
      if (writer) tensors.emplace_back(item.name, value.cpu().contiguous());
      weight_map[item.name] = file(s);
      total += item.nbytes;
    }
    try {
      if (writer) {
        ckpt::save_safetensors(tensors, ckpt::join_path(dir, file(s)),
                               {{"format", "pt"}}, &storage);
      }
    } catch (const std::exception&) {
      failure = std::current_exception();
    }
    vote(comm, failure, dir);
    written.insert(file(s));
  }
  try {
    if (writer) {
      if (shards.size() > 1) {
        const Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
        storage.write_file_atomic(ckpt::join_path(dir, "model.safetensors.index.json"),
                                  index.dump(2) + "\n");
        written.insert("model.safetensors.index.json");
      }
      if (!options.config.is_null()) {
        storage.write_file_atomic(ckpt::join_path(dir, "config.json"),
                                  config_with_dtype(options.config, engine.model_dtype()).dump(2) +
                                      "\n");
      }
      for (const std::string& name : options.extra_files) {
        const std::string from = ckpt::join_path(options.extra_files_from, name);
        if (options.extra_files_from.empty() || !std::filesystem::is_regular_file(from)) continue;
        storage.write_file_atomic(ckpt::join_path(dir, name),
                                  storage.read_file(from, uint64_t{1} << 30));
        written.insert(name);
      }
      if (!one_file) remove_stale(dir, written);
    }
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  vote(comm, failure, dir);
  if (options.weights) {
    ZRT_LOG_INFO("saved ", weight_map.size(), " tensors (", total >> 20, " MiB) to ", dir, " in ",
                 shards.size(), " file(s)");
  }
}

std::vector<std::string> hf_tokenizer_and_generation_files() {
  return {"tokenizer.model",         "tokenizer.json",    "tokenizer_config.json",
          "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
          "generation_config.json"};
}

}  // namespace zrt
