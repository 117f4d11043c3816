// The collective commit protocol on in-process worlds of 1-3 ranks: complete tags, manifests and
// `latest`; an injected failure at every write / fsync / rename / directory fsync of every rank
// (previous `latest` intact, no temp files left, the error names the file); cross-rank tag
// validation; invalid tags; verify_tag on damaged tags.
#include "checkpoint/commit.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/layout.h"
#include "checkpoint/pt/pt_file.h"
#include "comm/local_comm.h"
#include "core/error.h"
#include "core/logging.h"
#include "tests/checkpoint/test_util.h"

namespace zrt::ckpt {
namespace {

using Op = FaultInjectingStorage::Op;
using test::TempDir;

// What each rank of a stage-2-like checkpoint writes: rank 0 the model states, every rank its
// optimizer partition. `version` changes the contents.
CommitSpec make_spec(const std::string& dir, const std::string& tag, int rank, int world,
                     int version) {
  CommitSpec spec;
  spec.save_dir = dir;
  spec.tag = tag;
  spec.zero_stage = 2;
  spec.engine = {{"global_steps", version}};
  if (rank == 0) {
    Value model = Value::dict();
    model.set("module", Value::ordered_dict());
    model.at("module").set("w", torch::full({4, 3}, static_cast<float>(version)));
    model.set("global_steps", version);
    spec.files.push_back(PendingFile::pt(model_states_name(), model));
  }
  Value optim = Value::dict();
  optim.set("optimizer_state_dict", Value::dict());
  optim.at("optimizer_state_dict")
      .set("single_partition_of_fp32_groups",
           Value::list({torch::full({100 + rank}, static_cast<float>(version))}));
  spec.files.push_back(PendingFile::pt(optim_states_name(rank, false), optim));
  (void)world;
  return spec;
}

std::vector<std::string> all_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    out.push_back(e.path().string().substr(dir.size() + 1));
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool has_temp_files(const std::string& dir) {
  for (const auto& f : all_files(dir)) {
    if (f.find(".zrt-tmp-") != std::string::npos) return true;
  }
  return false;
}

class CommitTest : public ::testing::TestWithParam<int> {};

TEST_P(CommitTest, SaveWritesACompleteTagAndLatest) {
  const int world = GetParam();
  TempDir dir;
  PosixStorage storage;
  std::mutex mu;
  std::vector<CommitResult> results(world);
  comm::run_local_world(world, [&](comm::Comm& comm) {
    CommitResult r = commit_checkpoint(
        comm, storage, make_spec(dir.path(), "global_step7", comm.rank(), world, 7));
    std::lock_guard<std::mutex> lock(mu);
    results[comm.rank()] = r;
  });
  EXPECT_EQ(read_latest(dir.path()).value(), "global_step7");
  EXPECT_EQ(test::read_all(dir / "latest"), "global_step7");  // no newline, like DeepSpeed
  std::vector<std::string> expect = {"global_step7", "global_step7/mp_rank_00_model_states.pt",
                                     "global_step7/zrt_manifest.json", "latest"};
  for (int r = 0; r < world; ++r) {
    expect.push_back("global_step7/" + optim_states_name(r, false));
  }
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(all_files(dir.path()), expect);
  const Manifest m = verify_tag(dir.path(), "global_step7");
  EXPECT_EQ(m.world_size, world);
  EXPECT_EQ(m.zero_stage, 2);
  EXPECT_EQ(m.files.size(), static_cast<size_t>(world + 1));
  EXPECT_EQ(m.engine.at("global_steps"), 7);
  EXPECT_EQ(m.find(optim_states_name(world - 1, false))->rank, world - 1);
  for (int r = 0; r < world; ++r) EXPECT_EQ(results[r].manifest.files.size(), m.files.size());
  Value optim = load_pt(dir / ("global_step7/" + optim_states_name(world - 1, false)));
  EXPECT_EQ(
      optim.at("optimizer_state_dict").at("single_partition_of_fp32_groups")[0].as_tensor().numel(),
      100 + world - 1);
}

// Saves killed by SIGKILL leave temp files (in their tag folder and `latest`'s): the next save
// removes every file of that naming pattern in save_dir and its tag folders, and nothing else.
TEST_P(CommitTest, NextSaveRemovesTempFilesOfKilledSaves) {
  const int world = GetParam();
  TempDir dir;
  PosixStorage storage;
  std::filesystem::create_directories(dir / "global_step3");
  const std::vector<std::string> leftovers = {
      "latest.zrt-tmp-0123456789abcdef",
      "global_step3/mp_rank_00_model_states.pt.zrt-tmp-00000000deadbeef"};
  const std::vector<std::string> others = {"notes.txt", "global_step3/latest.tmp",
                                           "global_step3/x.zrt-tmp-123"};
  for (const auto& f : leftovers) std::ofstream(dir / f) << "partial";
  for (const auto& f : others) std::ofstream(dir / f) << "not ours";
  comm::run_local_world(world, [&](comm::Comm& comm) {
    commit_checkpoint(comm, storage, make_spec(dir.path(), "global_step7", comm.rank(), world, 7));
  });
  for (const auto& f : leftovers) EXPECT_FALSE(std::filesystem::exists(dir / f)) << f;
  for (const auto& f : others) EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
  EXPECT_FALSE(has_temp_files(dir / "global_step7"));
}

TEST_P(CommitTest, InjectedFailureAtEveryOperation) {
  const int world = GetParam();
  // Count each rank's storage calls in one clean save.
  std::vector<std::array<int64_t, FaultInjectingStorage::kNumOps>> counts(world);
  {
    TempDir dir;
    comm::run_local_world(world, [&](comm::Comm& comm) {
      FaultInjectingStorage counting(std::make_shared<PosixStorage>());
      commit_checkpoint(comm, counting, make_spec(dir.path(), "a", comm.rank(), world, 1));
      for (int op = 0; op < FaultInjectingStorage::kNumOps; ++op) {
        counts[comm.rank()][op] = counting.count(static_cast<Op>(op));
      }
    });
  }
  int injected = 0;
  for (int victim = 0; victim < world; ++victim) {
    for (int op = 0; op < FaultInjectingStorage::kNumOps; ++op) {
      for (int64_t k = 1; k <= counts[victim][op]; ++k) {
        SCOPED_TRACE(
            str("rank ", victim, " fails ", FaultInjectingStorage::op_name(Op(op)), " #", k));
        TempDir dir;
        PosixStorage plain;
        comm::run_local_world(world, [&](comm::Comm& comm) {
          commit_checkpoint(comm, plain, make_spec(dir.path(), "old", comm.rank(), world, 1));
        });
        std::vector<std::string> errors(world);
        std::atomic<bool> fired{false};
        comm::run_local_world(world, [&](comm::Comm& comm) {
          FaultInjectingStorage faulty(std::make_shared<PosixStorage>());
          if (comm.rank() == victim) faulty.fail_at(Op(op), k);
          try {
            commit_checkpoint(comm, faulty, make_spec(dir.path(), "new", comm.rank(), world, 2));
          } catch (const CheckpointError& e) {
            errors[comm.rank()] = e.what();
          }
          if (faulty.fired()) fired = true;
        });
        ASSERT_TRUE(fired);
        ++injected;
        // Every rank failed, and the message names the file (or directory) that failed.
        for (int r = 0; r < world; ++r) {
          ASSERT_FALSE(errors[r].empty()) << "rank " << r << " did not fail";
          EXPECT_NE(errors[r].find("injected fault: "), std::string::npos) << errors[r];
          EXPECT_NE(errors[r].find(dir.path()), std::string::npos) << errors[r];
          EXPECT_EQ(errors[r], errors[0]);
        }
        EXPECT_FALSE(has_temp_files(dir.path())) << testing::PrintToString(all_files(dir.path()));
        // `latest` names a complete tag: the old one, unless only the directory fsync after
        // replacing `latest` failed (then the new, complete tag).
        const std::string latest = read_latest(dir.path()).value();
        EXPECT_TRUE(check_tag(dir.path(), latest).empty());
        const bool after_latest =
            errors[0].find("writing " + dir.path() + "/latest: the file is in place") !=
            std::string::npos;
        EXPECT_EQ(latest, after_latest ? "new" : "old") << errors[0];
        EXPECT_TRUE(check_tag(dir.path(), "old").empty());
        // The failed tag is complete only if its manifest got written.
        const bool new_complete = check_tag(dir.path(), "new").empty();
        EXPECT_EQ(new_complete, errors[0].find("the tag itself is complete") != std::string::npos)
            << errors[0];
        if (!new_complete) {
          for (const auto& f : all_files(dir.path())) {
            EXPECT_EQ(f.rfind("new/", 0), std::string::npos) << "leftover " << f;
          }
        }
      }
    }
  }
  RecordProperty("injected_failures", injected);
  EXPECT_GE(injected, 15 + 5 * world);  // rank 0 also writes the model, manifest and latest
}

TEST_P(CommitTest, FailedResaveOfTheLatestTagKeepsItUntilTheRenames) {
  const int world = GetParam();
  for (Op op : {Op::kWrite, Op::kSync, Op::kRename}) {
    TempDir dir;
    PosixStorage plain;
    comm::run_local_world(world, [&](comm::Comm& comm) {
      commit_checkpoint(comm, plain, make_spec(dir.path(), "t", comm.rank(), world, 1));
    });
    std::string error;
    comm::run_local_world(world, [&](comm::Comm& comm) {
      FaultInjectingStorage faulty(std::make_shared<PosixStorage>());
      if (comm.rank() == world - 1) faulty.fail_at(op, 1);
      try {
        commit_checkpoint(comm, faulty, make_spec(dir.path(), "t", comm.rank(), world, 2));
      } catch (const CheckpointError& e) {
        if (comm.rank() == 0) error = e.what();
      }
    });
    ASSERT_FALSE(error.empty());
    EXPECT_EQ(read_latest(dir.path()).value(), "t");
    if (op == Op::kRename) {
      // Renames had started: the tag is refused as incomplete, never silently mixed.
      EXPECT_NE(error.find("(rename)"), std::string::npos) << error;
      EXPECT_THROW(verify_tag(dir.path(), "t"), CheckpointError);
    } else {
      // Temp files only: the old tag is untouched.
      EXPECT_NE(error.find("(write)"), std::string::npos) << error;
      EXPECT_NO_THROW(verify_tag(dir.path(), "t"));
      Value model = load_pt(dir / "t/mp_rank_00_model_states.pt");
      EXPECT_EQ(model.at("global_steps").as_int(), 1);
    }
    EXPECT_FALSE(has_temp_files(dir.path()));
  }
}

TEST_P(CommitTest, TagValidationAcrossRanks) {
  const int world = GetParam();
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  TempDir dir;
  PosixStorage storage;
  CheckpointOptions fail;
  fail.tag_validation = TagValidation::kFail;
  std::vector<std::string> errors(world);
  comm::run_local_world(world, [&](comm::Comm& comm) {
    const std::string tag = "step" + std::to_string(comm.rank());
    try {
      commit_checkpoint(comm, storage, make_spec(dir.path(), tag, comm.rank(), world, 1), fail);
    } catch (const CheckpointError& e) {
      errors[comm.rank()] = e.what();
    }
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_NE(errors[r].find("The checkpoint tag name 'step" + std::to_string(r) +
                             "' is not consistent across all ranks."),
              std::string::npos)
        << errors[r];
  }
  EXPECT_TRUE(all_files(dir.path()).empty());
  // Warn: a warning per rank, no error from the check itself.
  std::atomic<int> warnings{0};
  set_log_sink([&](LogLevel level, const std::string& line) {
    if (level == LogLevel::kWarn && line.find("is not consistent") != std::string::npos) {
      ++warnings;
    }
  });
  comm::run_local_world(world, [&](comm::Comm& comm) {
    EXPECT_FALSE(
        check_tag_consistent(comm, "s" + std::to_string(comm.rank()), TagValidation::kWarn));
    EXPECT_TRUE(check_tag_consistent(comm, "same", TagValidation::kFail));
    EXPECT_TRUE(
        check_tag_consistent(comm, "x" + std::to_string(comm.rank()), TagValidation::kIgnore));
  });
  set_log_sink(nullptr);
  EXPECT_EQ(warnings.load(), world);
}

TEST_P(CommitTest, NodeLocalStorageAndNoLatest) {
  const int world = GetParam();
  TempDir dir;
  PosixStorage storage;
  CheckpointOptions options;
  options.use_node_local_storage = true;
  comm::run_local_world(world, [&](comm::Comm& comm) {
    CommitSpec spec = make_spec(dir.path(), "global_step3", comm.rank(), world, 3);
    spec.save_latest = false;
    commit_checkpoint(comm, storage, spec, options);
  });
  EXPECT_FALSE(read_latest(dir.path()).has_value());
  EXPECT_EQ(verify_tag(dir.path(), "global_step3").files.size(), static_cast<size_t>(world + 1));
  EXPECT_EQ(complete_tags(dir.path()), std::vector<std::string>{"global_step3"});
}

TEST_P(CommitTest, InvalidTagsAndNamesFailOnEveryRank) {
  const int world = GetParam();
  for (const std::string tag : {"../escape", "/abs", "a/b", "..", ""}) {
    TempDir dir;
    PosixStorage storage;
    std::atomic<int> failed{0};
    comm::run_local_world(world, [&](comm::Comm& comm) {
      try {
        commit_checkpoint(comm, storage, make_spec(dir.path(), tag, comm.rank(), world, 1));
      } catch (const CheckpointError& e) {
        if (std::string(e.what()).find("invalid checkpoint tag") != std::string::npos) ++failed;
      }
    });
    EXPECT_EQ(failed.load(), world) << tag;
    EXPECT_TRUE(all_files(dir.path()).empty()) << tag;
  }
  TempDir dir;
  PosixStorage storage;
  std::atomic<int> failed{0};
  comm::run_local_world(world, [&](comm::Comm& comm) {
    CommitSpec spec = make_spec(dir.path(), "t", comm.rank(), world, 1);
    if (comm.rank() == world - 1) spec.files.push_back(PendingFile::pt("../../x.pt", Value()));
    try {
      commit_checkpoint(comm, storage, spec);
    } catch (const CheckpointError& e) {
      if (std::string(e.what()).find("invalid checkpoint file name '../../x.pt'") !=
          std::string::npos) {
        ++failed;
      }
    }
  });
  EXPECT_EQ(failed.load(), world);
}

TEST_P(CommitTest, VerifyFindsDamage) {
  const int world = GetParam();
  TempDir dir;
  PosixStorage storage;
  comm::run_local_world(world, [&](comm::Comm& comm) {
    commit_checkpoint(comm, storage, make_spec(dir.path(), "t", comm.rank(), world, 1));
  });
  const std::string victim = dir / ("t/" + optim_states_name(0, false));
  std::string bytes = test::read_all(victim);
  bytes[bytes.size() / 2] ^= 1;
  test::write_all(victim, bytes);
  EXPECT_TRUE(check_tag(dir.path(), "t", VerifyLevel::kSizes).empty());
  auto problems = check_tag(dir.path(), "t");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(victim + ": CRC-32"), std::string::npos) << problems[0];
  test::write_all(victim, "short");
  problems = check_tag(dir.path(), "t", VerifyLevel::kSizes);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("5 bytes, the manifest says"), std::string::npos) << problems[0];
  std::filesystem::remove(dir / "t/zrt_manifest.json");
  try {
    verify_tag(dir.path(), "t");
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("is incomplete: it has no zrt_manifest.json"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(verify_tag(dir.path(), "missing"), CheckpointError);
  EXPECT_TRUE(complete_tags(dir.path()).empty());
}

INSTANTIATE_TEST_SUITE_P(Worlds, CommitTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace zrt::ckpt
