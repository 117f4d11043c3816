// Slot selection (see world.h). select_world in plan.cpp applies them in DeepSpeed's order:
// include/exclude, then --num_nodes, then --num_gpus, then (ours) --np.
#include "launch/world.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"

namespace zrt::launch {
namespace {

std::string join_slots(const std::vector<int>& slots) {
  std::string text;
  for (std::size_t i = 0; i < slots.size(); ++i) text += (i ? "," : "") + std::to_string(slots[i]);
  return text;
}

// Splits on `sep`, keeping empty pieces so that "a@@b" can be reported.
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

int parse_slot(const std::string& text, const std::string& flag, const std::string& spec) {
  const bool digits =
      !text.empty() && text.size() <= 6 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  ZRT_CHECK_AS(ConfigError, digits, flag, " '", spec, "': slot '", text,
               "' is not a non-negative integer");
  return std::stoi(text);
}

const HostSlots* find_host(const World& world, const std::string& host) {
  for (const HostSlots& h : world.hosts) {
    if (h.host == host) return &h;
  }
  return nullptr;
}

// Resolves a spec against `world`: host -> set of named slots (all slots for a bare host).
std::map<std::string, std::set<int>> resolve_spec(const World& world, const std::string& spec,
                                                  const std::string& flag) {
  std::map<std::string, std::set<int>> named;
  for (const SlotSpecItem& item : parse_slot_spec(spec, flag)) {
    const HostSlots* host = find_host(world, item.host);
    std::string known;
    for (const HostSlots& h : world.hosts) known += (known.empty() ? "" : ", ") + h.host;
    ZRT_CHECK_AS(ConfigError, host != nullptr, flag, " '", spec, "': unknown host '", item.host,
                 "' (hosts: ", known, ")");
    std::set<int>& slots = named[item.host];
    if (item.slots.empty()) {
      slots.insert(host->slots.begin(), host->slots.end());
      continue;
    }
    for (int slot : item.slots) {
      const bool known_slot =
          std::find(host->slots.begin(), host->slots.end(), slot) != host->slots.end();
      ZRT_CHECK_AS(ConfigError, known_slot, flag, " '", spec, "': host '", item.host,
                   "' has no slot ", slot, " (slots: ", join_slots(host->slots), ")");
      slots.insert(slot);
    }
  }
  return named;
}

}  // namespace

int World::num_ranks() const {
  int n = 0;
  for (const HostSlots& h : hosts) n += static_cast<int>(h.slots.size());
  return n;
}

int World::max_ranks_per_host() const {
  int n = 0;
  for (const HostSlots& h : hosts) n = std::max(n, static_cast<int>(h.slots.size()));
  return n;
}

bool World::slots_are_prefixes() const {
  for (const HostSlots& h : hosts) {
    for (std::size_t i = 0; i < h.slots.size(); ++i) {
      if (h.slots[i] != static_cast<int>(i)) return false;
    }
  }
  return true;
}

std::string World::describe() const {
  std::string text;
  for (const HostSlots& h : hosts)
    text += (text.empty() ? "" : " ") + h.host + ":" + join_slots(h.slots);
  return text;
}

World world_from_hostfile(const std::vector<HostfileEntry>& entries) {
  World world;
  for (const HostfileEntry& e : entries)
    world.hosts.push_back(make_local_world(e.host, e.slots).hosts[0]);
  return world;
}

World make_local_world(const std::string& host, int slots) {
  ZRT_INTERNAL_ASSERT(slots > 0, "slots=", slots);
  HostSlots h{host, {}};
  for (int i = 0; i < slots; ++i) h.slots.push_back(i);
  return World{{h}};
}

std::vector<SlotSpecItem> parse_slot_spec(const std::string& spec, const std::string& flag) {
  ZRT_CHECK_AS(ConfigError, !spec.empty(), flag, ": empty spec (expected 'host1:0,1@host2')");
  std::vector<SlotSpecItem> items;
  for (const std::string& part : split(spec, '@')) {
    ZRT_CHECK_AS(ConfigError, !part.empty() && part.find_first_of(" \t") == std::string::npos, flag,
                 " '", spec, "': bad item '", part, "' (expected 'host' or 'host:0,1')");
    const std::size_t colon = part.find(':');
    SlotSpecItem item{part.substr(0, colon), {}};
    ZRT_CHECK_AS(ConfigError, !item.host.empty(), flag, " '", spec, "': item '", part,
                 "' has no host name");
    if (colon != std::string::npos) {
      for (const std::string& slot : split(part.substr(colon + 1), ',')) {
        item.slots.push_back(parse_slot(slot, flag, spec));
      }
    }
    items.push_back(std::move(item));
  }
  return items;
}

World include_slots(const World& world, const std::string& spec) {
  const auto named = resolve_spec(world, spec, "--include");
  World out;
  for (const HostSlots& h : world.hosts) {
    const auto it = named.find(h.host);
    if (it != named.end()) out.hosts.push_back({h.host, {it->second.begin(), it->second.end()}});
  }
  return out;
}

World exclude_slots(const World& world, const std::string& spec) {
  const auto named = resolve_spec(world, spec, "--exclude");
  World out;
  for (const HostSlots& h : world.hosts) {
    const auto it = named.find(h.host);
    HostSlots kept{h.host, {}};
    for (int slot : h.slots) {
      if (it == named.end() || it->second.count(slot) == 0) kept.slots.push_back(slot);
    }
    if (!kept.slots.empty()) out.hosts.push_back(std::move(kept));
  }
  ZRT_CHECK_AS(ConfigError, !out.hosts.empty(), "--exclude '", spec, "' leaves no slots (from ",
               world.describe(), ")");
  return out;
}

World first_hosts(const World& world, int n) {
  ZRT_CHECK_AS(ConfigError, n <= static_cast<int>(world.hosts.size()), "--num_nodes ", n,
               " but only ", world.hosts.size(), " host(s) are available: ", world.describe());
  return World{{world.hosts.begin(), world.hosts.begin() + n}};
}

World first_slots_per_host(const World& world, int n) {
  World out;
  for (const HostSlots& h : world.hosts) {
    ZRT_CHECK_AS(ConfigError, n <= static_cast<int>(h.slots.size()), "--num_gpus ", n,
                 " but host '", h.host, "' has only ", h.slots.size(),
                 " slot(s): ", join_slots(h.slots));
    out.hosts.push_back({h.host, {h.slots.begin(), h.slots.begin() + n}});
  }
  return out;
}

World first_ranks(const World& world, int n) {
  ZRT_CHECK_AS(ConfigError, n <= world.num_ranks(), "--np ", n, " but only ", world.num_ranks(),
               " slot(s) are available: ", world.describe());
  World out;
  int left = n;
  for (const HostSlots& h : world.hosts) {
    if (left == 0) break;
    const int take = std::min(left, static_cast<int>(h.slots.size()));
    out.hosts.push_back({h.host, {h.slots.begin(), h.slots.begin() + take}});
    left -= take;
  }
  return out;
}

}  // namespace zrt::launch
