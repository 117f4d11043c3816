#include "zero/leaf_modules.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "core/strings.h"

namespace zrt {
namespace {

// The module's C++ type name with a ShardUnit<...> wrapper removed.
std::string type_name(const torch::nn::Module& module) {
  std::string name = module.name();
  const std::string wrapper = "zrt::ShardUnit<";
  if (starts_with(name, wrapper) && ends_with(name, ">")) {
    name = name.substr(wrapper.size(), name.size() - wrapper.size() - 1);
    while (ends_with(name, " ")) name.pop_back();
  }
  return name;
}

// "ns::FooImpl<T>" -> "FooImpl"; "a.b.Foo" -> "Foo".
std::string short_name(std::string name) {
  const size_t angle = name.find('<');
  if (angle != std::string::npos) name.resize(angle);
  const size_t colons = name.rfind("::");
  if (colons != std::string::npos) name = name.substr(colons + 2);
  const size_t dot = name.rfind('.');
  if (dot != std::string::npos) name = name.substr(dot + 1);
  return name;
}

// The modules set_z3_leaf_modules marked; expired entries are dropped as the list is walked.
std::mutex g_mutex;
std::vector<std::weak_ptr<torch::nn::Module>> g_leaves;

// Every module of `model` with its name, the model itself first when a shared_ptr holds it.
std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> all_modules(
    torch::nn::Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> out;
  try {
    out.emplace_back("", model.shared_from_this());
  } catch (const std::bad_weak_ptr&) {  // a model on the stack: only its submodules
  }
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

}  // namespace

bool module_class_matches(const torch::nn::Module& module, const std::string& class_name) {
  const std::string full = type_name(module);
  if (class_name == full) return true;
  const std::string want = short_name(class_name);
  const std::string have = short_name(full);
  return want == have || (ends_with(have, "Impl") && want + "Impl" == have);
}

namespace {
bool of_any_class(const torch::nn::Module& module, const std::vector<std::string>& classes) {
  return std::any_of(classes.begin(), classes.end(),
                     [&](const std::string& c) { return module_class_matches(module, c); });
}
}  // namespace

bool LeafModules::matches(const std::string& name, const torch::nn::Module& module) const {
  if (of_any_class(module, classes)) return true;
  if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  for (const std::string& suffix : name_suffixes) {
    if (!suffix.empty() && ends_with(name, suffix)) return true;
  }
  return false;
}

std::vector<std::string> set_z3_leaf_modules(torch::nn::Module& model,
                                             const std::vector<std::string>& classes) {
  std::vector<std::string> marked;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [name, module] : all_modules(model)) {
    if (!of_any_class(*module, classes)) continue;
    marked.push_back(name);
    const bool known = std::any_of(g_leaves.begin(), g_leaves.end(), [&](const auto& w) {
      return w.lock() == module;
    });
    if (!known) g_leaves.push_back(module);
  }
  std::string wanted;
  for (const std::string& c : classes) wanted += (wanted.empty() ? "" : ", ") + c;
  ZRT_CHECK_AS(UsageError, !marked.empty(), "set_z3_leaf_modules: no module of the model is of ",
               "class ", wanted.empty() ? "(none given)" : wanted,
               " (classes are matched by their C++ name, e.g. MoeBlock or MoeBlockImpl)");
  return marked;
}

void unset_z3_leaf_modules(torch::nn::Module& model, const std::vector<std::string>& classes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [name, module] : all_modules(model)) {
    if (!of_any_class(*module, classes)) continue;
    g_leaves.erase(std::remove_if(g_leaves.begin(), g_leaves.end(),
                                  [&](const auto& w) { return w.lock() == module; }),
                   g_leaves.end());
  }
}

bool is_z3_leaf_module(const torch::nn::Module& module) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_leaves.erase(std::remove_if(g_leaves.begin(), g_leaves.end(),
                                [](const auto& w) { return w.expired(); }),
                 g_leaves.end());
  return std::any_of(g_leaves.begin(), g_leaves.end(),
                     [&](const auto& w) { return w.lock().get() == &module; });
}

}  // namespace zrt
