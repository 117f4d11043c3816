// Tests of the small building blocks: CRC-32 and SHA-1 vectors, atomic file writes through the
// storage seam (with injected failures), DeepSpeed file names, tag validation, `latest`, the HF
// resume rules and natural sorting.
#include <random>

#include <gtest/gtest.h>

#include "checkpoint/hash.h"
#include "checkpoint/layout.h"
#include "checkpoint/storage.h"
#include "core/error.h"
#include "tests/checkpoint/test_util.h"
#include "tests/support/error_of.h"
#include <sys/stat.h>

namespace zrt::ckpt {
namespace {

using test::TempDir;

const auto error_of = &zrt::test::error_of<CheckpointError>;

uint32_t bitwise_crc(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

TEST(Hash, Crc32MatchesTheReference) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  EXPECT_EQ(crc32_hex(0xCBF43926u), "cbf43926");
  std::mt19937 rng(5);
  for (size_t n :
       {1, 7, 15, 16, 17, 31, 63, 64, 65, 79, 80, 100, 127, 128, 129, 1000, 4099, 100003}) {
    std::string s(n + 3, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    for (size_t misalign = 0; misalign < 3; ++misalign) {  // unaligned starts
      const std::string sub = s.substr(misalign, n);
      EXPECT_EQ(crc32(s.data() + misalign, n), bitwise_crc(sub)) << n << "+" << misalign;
    }
    s.resize(n);
    // Incremental equals one shot, for any split.
    const size_t cut = n / 3;
    EXPECT_EQ(crc32_update(crc32(s.data(), cut), s.data() + cut, n - cut), bitwise_crc(s));
  }
}

TEST(Hash, Sha1Vectors) {
  EXPECT_EQ(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  EXPECT_EQ(sha1_hex(std::string(1000000, 'a')), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  EXPECT_EQ(sha1_hex("global_step10"), sha1_hex("global_step10"));
  EXPECT_NE(sha1_hex("global_step10"), sha1_hex("global_step11"));
}

TEST(Storage, AtomicWriteReplacesTheFileAndReportsSizeAndCrc) {
  TempDir dir;
  PosixStorage s;
  const std::string path = dir / "f.bin";
  std::string big(3 << 20, 'x');
  big[12345] = 'y';
  FileInfo info = s.write_file_atomic(path, [&](ByteSink& sink) {
    sink.write("head", 4);               // buffered
    sink.write(big.data(), big.size());  // passes through
    sink.write("tail", 4);
  });
  const std::string expect = "head" + big + "tail";
  EXPECT_EQ(test::read_all(path), expect);
  EXPECT_EQ(info.size, expect.size());
  EXPECT_EQ(info.crc32, crc32(expect.data(), expect.size()));
  s.write_file_atomic(path, std::string("second"));
  EXPECT_EQ(s.read_file(path, 100), "second");
  EXPECT_EQ(s.list(dir.path()), std::vector<std::string>{"f.bin"});
  EXPECT_NE(error_of([&] { s.read_file(path, 3); }).find("more than the limit of 3"),
            std::string::npos);
}

TEST(Storage, EveryInjectedFailureLeavesTheOldFileAndNoTemp) {
  using Op = FaultInjectingStorage::Op;
  for (Op op : {Op::kCreate, Op::kWrite, Op::kSync, Op::kRename}) {
    for (int k = 1; k <= 3; ++k) {
      TempDir dir;
      const std::string path = dir / "state.pt";
      PosixStorage().write_file_atomic(path, std::string("old"));
      auto faulty = FaultInjectingStorage(std::make_shared<PosixStorage>());
      faulty.fail_at(op, k);
      const std::string big(3 << 20, 'n');
      const std::string msg = error_of([&] {
        faulty.write_file_atomic(path, [&](ByteSink& sink) {
          sink.write(big.data(), big.size());
          sink.write(big.data(), big.size());
          sink.write(big.data(), big.size());
        });
      });
      if (!faulty.fired()) continue;  // fewer than k calls of this op
      EXPECT_NE(msg.find("writing " + path + " failed: injected fault: "), std::string::npos)
          << msg;
      EXPECT_EQ(test::read_all(path), "old");
      EXPECT_EQ(PosixStorage().list(dir.path()), std::vector<std::string>{"state.pt"});
    }
  }
}

TEST(Storage, TempNamesAndPaths) {
  const std::string t = temp_name("/a/b/c.pt");
  EXPECT_EQ(t.rfind("/a/b/c.pt.zrt-tmp-", 0), 0u);
  EXPECT_TRUE(is_temp_name(t));
  EXPECT_NE(temp_name("x"), temp_name("x"));
  EXPECT_FALSE(is_temp_name("c.pt"));
  EXPECT_FALSE(is_temp_name("c.pt.zrt-tmp-xyz"));
  EXPECT_EQ(join_path("a/", "b"), "a/b");
  EXPECT_EQ(join_path("a", "b"), "a/b");
  EXPECT_EQ(parent_dir("a/b/c"), "a/b");
  EXPECT_EQ(parent_dir("c"), ".");
  EXPECT_EQ(parent_dir("/c"), "/");
  TempDir dir;
  PosixStorage s;
  s.make_dirs(dir / "x/y/z");
  EXPECT_TRUE(s.is_dir(dir / "x/y/z"));
  s.make_dirs(dir / "x/y/z");  // idempotent
  test::write_all(dir / "file", "1");
  EXPECT_THROW(s.make_dirs(dir / "file/sub"), CheckpointError);
  EXPECT_TRUE(s.remove(dir / "file"));
  EXPECT_FALSE(s.remove(dir / "file"));
  EXPECT_TRUE(s.list(dir / "missing").empty());
}

TEST(Layout, DeepSpeedFileNames) {
  EXPECT_EQ(model_states_name(), "mp_rank_00_model_states.pt");
  EXPECT_EQ(model_states_name(3), "mp_rank_03_model_states.pt");
  EXPECT_EQ(zero3_model_states_name(2), "zero_pp_rank_2_mp_rank_00_model_states.pt");
  EXPECT_EQ(optim_states_name(0, false), "zero_pp_rank_0_mp_rank_00_optim_states.pt");
  EXPECT_EQ(optim_states_name(11, true), "bf16_zero_pp_rank_11_mp_rank_00_optim_states.pt");
  EXPECT_EQ(optim_states_names(2, false).size(), 2u);
  EXPECT_EQ(default_tag(1200), "global_step1200");
}

TEST(Layout, TagValidation) {
  for (const char* ok : {"global_step10", "a", "A.b_c-d", "9", "x..y", "best.model"}) {
    EXPECT_TRUE(is_valid_tag(ok)) << ok;
  }
  EXPECT_TRUE(is_valid_tag(std::string(128, 'a')));
  EXPECT_FALSE(is_valid_tag(std::string(129, 'a')));
  for (const std::string& bad :
       std::vector<std::string>{"", ".", "..", "../x", "a/b", "/abs", "a\\b", ".hidden", "-x", "_x",
                                "a b", std::string("a\0b", 3), "tag\n", "t\xc3\xa9"}) {
    EXPECT_FALSE(is_valid_tag(bad)) << bad;
  }
  const std::string msg = error_of([] { validate_tag("../../etc"); });
  EXPECT_NE(msg.find("invalid checkpoint tag '../../etc'"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { validate_tag(std::string("a\0b", 3)); }).find("a\\x00b"),
            std::string::npos);
  EXPECT_EQ(tag_path("/ckpt", "global_step1"), "/ckpt/global_step1");
  EXPECT_THROW(tag_path("/ckpt", ".."), CheckpointError);
}

TEST(Layout, ReadLatest) {
  TempDir dir;
  EXPECT_FALSE(read_latest(dir.path()).has_value());
  test::write_all(dir / "latest", "global_step5");
  EXPECT_EQ(read_latest(dir.path()).value(), "global_step5");
  test::write_all(dir / "latest", "global_step5\n");
  EXPECT_EQ(read_latest(dir.path()).value(), "global_step5");
  test::write_all(dir / "latest", "global_step5\nglobal_step6");
  EXPECT_NE(error_of([&] { read_latest(dir.path()); }).find("more than one line"),
            std::string::npos);
  test::write_all(dir / "latest", "../../etc/passwd");
  EXPECT_NE(error_of([&] { read_latest(dir.path()); }).find("invalid checkpoint tag"),
            std::string::npos);
  test::write_all(dir / "latest", std::string(5000, 'a'));
  EXPECT_NE(error_of([&] { read_latest(dir.path()); }).find("more than the limit of 4096"),
            std::string::npos);
  std::filesystem::remove(dir / "latest");
  ASSERT_EQ(::mkfifo((dir / "latest").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { read_latest(dir.path()); }).find("not a regular file"),
            std::string::npos);
}

TEST(Layout, HfResumeRules) {
  TempDir dir;
  const std::string msg = error_of([&] { check_hf_resumable(dir.path()); });
  EXPECT_EQ(msg, "Can't find a valid checkpoint at " + dir.path());
  for (const char* name : {"global_step2", "global_step10", "other", "global_step1"}) {
    std::filesystem::create_directory(dir / name);
  }
  test::write_all(dir / "global_step_notes.txt", "x");  // glob matches files too
  EXPECT_NO_THROW(check_hf_resumable(dir.path()));
  EXPECT_EQ(glob_global_steps(dir.path()),
            (std::vector<std::string>{dir / "global_step1", dir / "global_step10",
                                      dir / "global_step2", dir / "global_step_notes.txt"}));
  EXPECT_EQ(std::string(hf_resume_failed("/out/checkpoint-5").what()),
            "[deepspeed] failed to resume from checkpoint /out/checkpoint-5");
}

TEST(Layout, NaturalSort) {
  std::vector<std::string> names = {"zero_pp_rank_10_x", "zero_pp_rank_2_x", "zero_pp_rank_1_x",
                                    "zero_pp_rank_02_y", "a"};
  std::sort(names.begin(), names.end(), natural_less);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "zero_pp_rank_1_x", "zero_pp_rank_2_x",
                                             "zero_pp_rank_02_y", "zero_pp_rank_10_x"}));
}

}  // namespace
}  // namespace zrt::ckpt
