// Slot selection: --include / --exclude specs, --num_nodes, --num_gpus, --np, in DeepSpeed's
// order, with the DeepSpeed documentation's examples; unknown hosts and slots are errors.
#include "launch/world.h"

#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "launch_test_util.h"

namespace zrt::launch {
namespace {

using test::error_message;

World four_by_four() {
  return world_from_hostfile(parse_hostfile(
      "worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=4\nworker-3 slots=4\n", "hosts"));
}

TEST(World, FromHostfileKeepsOrderAndCounts) {
  const World w = four_by_four();
  EXPECT_EQ(w.num_ranks(), 16);
  EXPECT_EQ(w.max_ranks_per_host(), 4);
  EXPECT_TRUE(w.slots_are_prefixes());
  EXPECT_EQ(w.describe(), "worker-0:0,1,2,3 worker-1:0,1,2,3 worker-2:0,1,2,3 worker-3:0,1,2,3");
  EXPECT_EQ(make_local_world("localhost", 2).describe(), "localhost:0,1");
}

TEST(SlotSpec, ParsesHostsAndSlots) {
  const auto items = parse_slot_spec("worker-0@worker-1:0,2", "--include");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].host, "worker-0");
  EXPECT_TRUE(items[0].slots.empty());
  EXPECT_EQ(items[1].host, "worker-1");
  EXPECT_EQ(items[1].slots, (std::vector<int>{0, 2}));
}

TEST(SlotSpec, RejectsMalformedSpecs) {
  for (const char* spec :
       {"", "@", "a@", "a@@b", ":0", "a:", "a:0,", "a:x", "a:-1", "a:0 ,1", "a b"}) {
    const std::string msg = error_message<ConfigError>([&] { parse_slot_spec(spec, "--include"); });
    EXPECT_NE(msg.find("--include"), std::string::npos) << spec << ": " << msg;
  }
}

// DeepSpeed docs: `--include="worker-2:0,1"` runs on GPUs 0 and 1 of worker-2 only.
TEST(Include, SlotsOfOneHost) {
  const World w = include_slots(four_by_four(), "worker-2:0,1");
  EXPECT_EQ(w.describe(), "worker-2:0,1");
  EXPECT_TRUE(w.slots_are_prefixes());
}

// The spec's example: all of worker-0 plus slots 0 and 2 of worker-1.
TEST(Include, WholeHostPlusSomeSlots) {
  const World w = include_slots(four_by_four(), "worker-0@worker-1:0,2");
  EXPECT_EQ(w.describe(), "worker-0:0,1,2,3 worker-1:0,2");
  EXPECT_EQ(w.num_ranks(), 6);
  EXPECT_FALSE(w.slots_are_prefixes());
}

TEST(Include, KeepsHostfileOrderAndMergesRepeats) {
  const World w = include_slots(four_by_four(), "worker-3:1@worker-1:3,2@worker-3:0");
  EXPECT_EQ(w.describe(), "worker-1:2,3 worker-3:0,1");
}

TEST(Include, UnknownHostOrSlotIsAnError) {
  std::string msg = error_message<ConfigError>([] { include_slots(four_by_four(), "worker-9"); });
  EXPECT_NE(msg.find("unknown host 'worker-9'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("worker-0, worker-1"), std::string::npos) << msg;
  msg = error_message<ConfigError>([] { include_slots(four_by_four(), "worker-1:4"); });
  EXPECT_NE(msg.find("host 'worker-1' has no slot 4 (slots: 0,1,2,3)"), std::string::npos) << msg;
}

// DeepSpeed docs: `--exclude="worker-2:0@worker-3:0,1"` drops GPU 0 of worker-2 and GPUs 0 and 1
// of worker-3.
TEST(Exclude, DocumentationExample) {
  const World w = exclude_slots(four_by_four(), "worker-2:0@worker-3:0,1");
  EXPECT_EQ(w.describe(), "worker-0:0,1,2,3 worker-1:0,1,2,3 worker-2:1,2,3 worker-3:2,3");
  EXPECT_EQ(w.num_ranks(), 13);
}

TEST(Exclude, WholeHostDisappears) {
  EXPECT_EQ(exclude_slots(four_by_four(), "worker-0@worker-2").describe(),
            "worker-1:0,1,2,3 worker-3:0,1,2,3");
  EXPECT_EQ(exclude_slots(four_by_four(), "worker-1:0,1,2,3").hosts.size(), 3u);
}

TEST(Exclude, EverythingOrUnknownIsAnError) {
  const World one = make_local_world("localhost", 2);
  EXPECT_NE(
      error_message<ConfigError>([&] { exclude_slots(one, "localhost"); }).find("leaves no slots"),
      std::string::npos);
  EXPECT_NE(
      error_message<ConfigError>([&] { exclude_slots(one, "localhost:2"); }).find("no slot 2"),
      std::string::npos);
  EXPECT_NE(error_message<ConfigError>([&] { exclude_slots(one, "other"); }).find("--exclude"),
            std::string::npos);
}

TEST(Select, NumNodesTakesTheFirstHosts) {
  EXPECT_EQ(first_hosts(four_by_four(), 2).describe(), "worker-0:0,1,2,3 worker-1:0,1,2,3");
  const std::string msg = error_message<ConfigError>([] { first_hosts(four_by_four(), 5); });
  EXPECT_NE(msg.find("--num_nodes 5 but only 4 host(s)"), std::string::npos) << msg;
}

TEST(Select, NumGpusTakesTheFirstSlotsOfEachHost) {
  const World w = first_slots_per_host(four_by_four(), 1);
  EXPECT_EQ(w.describe(), "worker-0:0 worker-1:0 worker-2:0 worker-3:0");
  const World uneven = world_from_hostfile(parse_hostfile("a slots=4\nb slots=1\n", "h"));
  const std::string msg = error_message<ConfigError>([&] { first_slots_per_host(uneven, 2); });
  EXPECT_NE(msg.find("--num_gpus 2 but host 'b' has only 1 slot(s)"), std::string::npos) << msg;
}

// DeepSpeed's order: --num_nodes, then --num_gpus (`--num_nodes 2 --num_gpus 3`).
TEST(Select, NumNodesAndNumGpusTogether) {
  const World w = first_slots_per_host(first_hosts(four_by_four(), 2), 3);
  EXPECT_EQ(w.describe(), "worker-0:0,1,2 worker-1:0,1,2");
  EXPECT_EQ(w.num_ranks(), 6);
}

TEST(Select, NpFillsHostsInOrder) {
  EXPECT_EQ(first_ranks(four_by_four(), 6).describe(), "worker-0:0,1,2,3 worker-1:0,1");
  EXPECT_EQ(first_ranks(four_by_four(), 16).num_ranks(), 16);
  const std::string msg = error_message<ConfigError>([] { first_ranks(four_by_four(), 17); });
  EXPECT_NE(msg.find("--np 17 but only 16 slot(s)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace zrt::launch
