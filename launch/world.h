// The set of (host, slot) pairs a job runs on, and the DeepSpeed-style ways to narrow it:
// --include / --exclude specs (`host1:0,1@host2` = slots 0 and 1 of host1 plus all of host2),
// --num_nodes (first N hosts), --num_gpus (first N slots of each host), --np (first N slots).
// Hosts keep hostfile order; each host's slot indices stay ascending. Errors are ConfigErrors.
#pragma once

#include <string>
#include <vector>

#include "launch/hostfile.h"

namespace zrt::launch {

struct HostSlots {
  std::string host;
  std::vector<int> slots;  // slot indices (GPU ordinals on GPU nodes), ascending
};

struct World {
  std::vector<HostSlots> hosts;

  int num_ranks() const;
  int max_ranks_per_host() const;
  // True when every host uses slots 0..k-1, so no device remapping is needed.
  bool slots_are_prefixes() const;
  // "worker-0:0,1 worker-1:0,1,2,3" (the include-spec spelling of each host).
  std::string describe() const;
};

// Every slot of every host, in file order.
World world_from_hostfile(const std::vector<HostfileEntry>& entries);
// One host with slots 0..slots-1.
World make_local_world(const std::string& host, int slots);

// One '@'-separated item of an include/exclude spec.
struct SlotSpecItem {
  std::string host;
  std::vector<int> slots;  // empty: every slot of the host
};

// Parses `host[:i,j,...]@...`; `flag` ("--include") names the spec in error messages.
std::vector<SlotSpecItem> parse_slot_spec(const std::string& spec, const std::string& flag);

// Keeps only what the spec names. Unknown hosts or slots are errors.
World include_slots(const World& world, const std::string& spec);
// Drops what the spec names; hosts left without slots disappear. Unknown hosts or slots are
// errors, and so is excluding everything.
World exclude_slots(const World& world, const std::string& spec);
// The first `n` hosts (n must not exceed the host count).
World first_hosts(const World& world, int n);
// The first `n` slots of each host (every host must have at least n).
World first_slots_per_host(const World& world, int n);
// The first `n` slots overall, filling hosts in order (n must not exceed the slot count).
World first_ranks(const World& world, int n);

}  // namespace zrt::launch
