// Slurm allocations (see slurm.h).
//
// Note [Slurm slot counts]
// SLURM_TASKS_PER_NODE is what salloc/sbatch always set: one count per node of the allocation
// (compressed, `2(x3),1`), from --ntasks / --ntasks-per-node, 1 per node when neither was asked
// for. It is also what Open MPI itself reads as the slots of each node under Slurm, so zrt-launch
// asking for more ranks on a node than that would be refused by mpirun too. SLURM_NTASKS_PER_NODE
// (set only with --ntasks-per-node) and the GPU counts are fallbacks for environments that carry
// only some of the variables.
#include "launch/slurm.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.h"

namespace zrt::launch {
namespace {

std::string shown(const std::string& variable, const std::string& text) {
  return variable + "='" + text + "'";
}

bool all_digits(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A positive integer of at most 6 digits, or nullopt.
std::optional<int> parse_positive(const std::string& text) {
  if (!all_digits(text) || text.size() > 6) return std::nullopt;
  const int value = std::stoi(text);
  if (value < 1) return std::nullopt;
  return value;
}

std::string get(const EnvMap& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// Splits at commas outside brackets and checks the brackets pair up without nesting.
std::vector<std::string> split_items(const std::string& text, const std::string& variable) {
  std::vector<std::string> items(1);
  bool in_bracket = false;
  for (char c : text) {
    if (c == '[') {
      ZRT_CHECK_AS(ConfigError, !in_bracket, shown(variable, text), ": nested '['");
      in_bracket = true;
    } else if (c == ']') {
      ZRT_CHECK_AS(ConfigError, in_bracket, shown(variable, text), ": ']' without '['");
      in_bracket = false;
    } else if (c == ',' && !in_bracket) {
      items.emplace_back();
      continue;
    } else {
      ZRT_CHECK_AS(ConfigError, is_name_char(c) || (in_bracket && c == ','), shown(variable, text),
                   ": unexpected character '", std::string(1, c), "'");
    }
    items.back() += c;
  }
  ZRT_CHECK_AS(ConfigError, !in_bracket, shown(variable, text), ": '[' without ']'");
  for (const std::string& item : items)
    ZRT_CHECK_AS(ConfigError, !item.empty(), shown(variable, text), ": empty host name");
  return items;
}

// The numbers of one bracket group ("01-04,07"), each zero-padded to the width of its range's
// lower bound, as Slurm writes them.
std::vector<std::string> expand_group(const std::string& group, const std::string& variable,
                                      const std::string& text) {
  ZRT_CHECK_AS(ConfigError, !group.empty(), shown(variable, text), ": empty brackets '[]'");
  std::vector<std::string> numbers;
  std::size_t start = 0;
  while (start <= group.size()) {
    const std::size_t end = std::min(group.find(',', start), group.size());
    const std::string range = group.substr(start, end - start);
    const std::size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    ZRT_CHECK_AS(ConfigError, all_digits(lo) && all_digits(hi) && lo.size() <= 9 && hi.size() <= 9,
                 shown(variable, text), ": bad range '", range, "' in '[", group,
                 "]' (expected N or N-M)");
    const long lo_value = std::stol(lo);
    const long hi_value = std::stol(hi);
    ZRT_CHECK_AS(ConfigError, lo_value <= hi_value, shown(variable, text), ": range '", range,
                 "' runs backwards");
    ZRT_CHECK_AS(ConfigError, hi_value - lo_value < kMaxSlurmNodes, shown(variable, text),
                 ": range '", range, "' has more than ", kMaxSlurmNodes, " nodes");
    for (long v = lo_value; v <= hi_value; ++v) {
      std::string number = std::to_string(v);
      if (number.size() < lo.size()) number.insert(0, lo.size() - number.size(), '0');
      numbers.push_back(std::move(number));
    }
    start = end + 1;
  }
  return numbers;
}

// One item, e.g. "r[1-2]n[01-02]": literal parts and bracket groups, expanded left to right.
void expand_item(const std::string& item, const std::string& variable, const std::string& text,
                 std::vector<std::string>* names) {
  std::vector<std::string> expanded = {""};
  std::size_t pos = 0;
  while (pos < item.size()) {
    const std::size_t open = item.find('[', pos);
    const std::string literal = item.substr(pos, open - pos);
    for (std::string& name : expanded) name += literal;
    if (open == std::string::npos) break;
    const std::size_t close = item.find(']', open);  // split_items checked it exists
    const auto numbers = expand_group(item.substr(open + 1, close - open - 1), variable, text);
    ZRT_CHECK_AS(ConfigError,
                 expanded.size() * numbers.size() + names->size() <=
                     static_cast<std::size_t>(kMaxSlurmNodes),
                 shown(variable, text), ": more than ", kMaxSlurmNodes, " nodes");
    std::vector<std::string> next;
    for (const std::string& prefix : expanded) {
      for (const std::string& number : numbers) next.push_back(prefix + number);
    }
    expanded = std::move(next);
    pos = close + 1;
  }
  names->insert(names->end(), expanded.begin(), expanded.end());
}

struct SlotCounts {
  std::vector<int> per_node;
  std::string source;  // for the note: "task(s) per node from SLURM_TASKS_PER_NODE=2(x2)"
};

std::string describe_counts(const std::vector<int>& counts) {
  if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; }))
    return std::to_string(counts[0]);
  std::string text;
  for (int c : counts) text += (text.empty() ? "" : ",") + std::to_string(c);
  return text;
}

// Note [Slurm slot counts]
SlotCounts slurm_slot_counts(const EnvMap& env, const std::string& nodelist_var, std::size_t nodes,
                             std::vector<std::string>* notes) {
  const std::string tasks = get(env, "SLURM_TASKS_PER_NODE");
  if (!tasks.empty()) {
    std::vector<int> counts = expand_slurm_tasks_per_node(tasks, "SLURM_TASKS_PER_NODE");
    ZRT_CHECK_AS(ConfigError, counts.size() == nodes, shown("SLURM_TASKS_PER_NODE", tasks),
                 " gives counts for ", counts.size(), " node(s) but ", nodelist_var, " lists ",
                 nodes);
    return {counts, "task(s) per node from SLURM_TASKS_PER_NODE=" + tasks};
  }
  const std::string ntasks = get(env, "SLURM_NTASKS_PER_NODE");
  if (!ntasks.empty()) {
    const auto n = parse_positive(ntasks);
    ZRT_CHECK_AS(ConfigError, n.has_value(), shown("SLURM_NTASKS_PER_NODE", ntasks),
                 " is not a positive integer");
    return {std::vector<int>(nodes, *n), "task(s) per node from SLURM_NTASKS_PER_NODE"};
  }
  for (const char* var : {"SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"}) {
    const std::string gpus = get(env, var);
    if (gpus.empty()) continue;
    if (const auto n = parse_positive(gpus)) {
      return {std::vector<int>(nodes, *n), str("slot(s) per node (one per GPU) from ", var)};
    }
    notes->push_back(str(shown(var, gpus), " is not a plain GPU count: ignored"));
  }
  return {std::vector<int>(nodes, 1),
          "slot per node (none of SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE, "
          "SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE gives a count)"};
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& text,
                                               const std::string& variable) {
  ZRT_CHECK_AS(ConfigError, !text.empty(), variable, " is empty");
  std::vector<std::string> names;
  for (const std::string& item : split_items(text, variable))
    expand_item(item, variable, text, &names);
  std::set<std::string> seen;
  for (const std::string& name : names) {
    ZRT_CHECK_AS(ConfigError, seen.insert(name).second, shown(variable, text), ": node '", name,
                 "' is listed twice");
  }
  return names;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& text, const std::string& variable) {
  std::vector<int> counts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const std::size_t paren = item.find('(');
    std::optional<int> count = parse_positive(item.substr(0, paren));
    std::optional<int> repeat = 1;
    if (paren != std::string::npos) {
      const bool shaped =
          item.size() > paren + 3 && item.compare(paren, 2, "(x") == 0 && item.back() == ')';
      repeat =
          shaped ? parse_positive(item.substr(paren + 2, item.size() - paren - 3)) : std::nullopt;
    }
    ZRT_CHECK_AS(ConfigError, count && repeat, shown(variable, text), ": bad item '", item,
                 "' (expected N or N(xM) with positive N and M, e.g. '2(x3),1')");
    ZRT_CHECK_AS(ConfigError, counts.size() + *repeat <= static_cast<std::size_t>(kMaxSlurmNodes),
                 shown(variable, text), ": more than ", kMaxSlurmNodes, " nodes");
    counts.insert(counts.end(), *repeat, *count);
    start = end + 1;
  }
  return counts;
}

std::optional<SlurmAllocation> slurm_allocation(const EnvMap& env) {
  std::string variable;
  for (const char* name : kSlurmNodelistVars) {
    if (!get(env, name).empty()) {
      variable = name;
      break;
    }
  }
  if (variable.empty()) return std::nullopt;
  const std::string nodelist = get(env, variable);
  const std::vector<std::string> nodes = expand_slurm_nodelist(nodelist, variable);
  SlurmAllocation allocation;
  const SlotCounts slots = slurm_slot_counts(env, variable, nodes.size(), &allocation.notes);
  for (std::size_t i = 0; i < nodes.size(); ++i)
    allocation.world.hosts.push_back(make_local_world(nodes[i], slots.per_node[i]).hosts[0]);
  allocation.notes.insert(allocation.notes.begin(),
                          str("Slurm allocation: ", nodes.size(), " node(s) from ", variable, "=",
                              nodelist, ", ", describe_counts(slots.per_node), " ", slots.source));
  return allocation;
}

}  // namespace zrt::launch
