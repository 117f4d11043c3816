// IoEngine on every backend (io_uring, libaio, posix): round trips over the option matrix,
// operations in flight together, counters, alignment and option errors, reads past the end, the
// ZRT_AIO_FAIL fault injection, and the buffered fallback.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "aio/aligned_buffer.h"
#include "aio/io_engine.h"
#include "aio/swap_file.h"
#include "core/error.h"
#include "tests/aio/aio_test_util.h"

namespace zrt::aio {
namespace {

using test::contains;
using test::error_of;
using test::random_buffer;
using test::same_bytes;
using test::ScopedEnv;
using test::ScratchDir;

constexpr int64_t kBlock = 64 * 1024;  // small blocks: many requests per operation

class EngineTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    // A container's seccomp profile may forbid io_uring or libaio: that backend is then skipped.
    try {
      IoEngine probe(AioOptions{}, GetParam());
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
  }
  AioOptions options(int64_t threads = 1, int64_t depth = 8) const {
    AioOptions o;
    o.block_size = kBlock;
    o.thread_count = threads;
    o.queue_depth = depth;
    return o;
  }
  ScratchDir dir_;
};

// Writes `bytes` random bytes at `offset`, reads them back into a fresh buffer, compares.
void round_trip(IoEngine& engine, const SwapFile& file, int64_t offset, int64_t bytes,
                uint32_t seed) {
  AlignedBuffer out = random_buffer(bytes, seed);
  AlignedBuffer in(bytes);
  engine.write(file, offset, out.data(), bytes).wait();
  engine.read(file, offset, in.data(), bytes).wait();
  ASSERT_TRUE(same_bytes(out, in, bytes))
      << engine.backend_name() << " offset " << offset << " bytes " << bytes;
}

TEST_P(EngineTest, RoundTripsOverTheOptionMatrix) {
  // Sizes that are not multiples of the block (and one smaller than it), on ext4 and tmpfs.
  const std::vector<int64_t> sizes = {3 * kBlock + 5 * 4096, 4096, 7 * kBlock + 8192};
  ScratchDir shm("/dev/shm");
  uint32_t seed = 1;
  for (const std::string& folder : {dir_.path(), shm.path()}) {
    SwapFile file = SwapFile::create(folder + "/matrix.swp", 16 * kBlock);
    for (int64_t threads : {1, 3}) {
      for (int64_t depth : {1, 8}) {
        for (bool single : {false, true}) {
          for (bool overlap : {false, true}) {
            AioOptions o = options(threads, depth);
            o.single_submit = single;
            o.overlap_events = overlap;
            IoEngine engine(o, GetParam());
            SCOPED_TRACE(::testing::Message()
                         << folder << " threads " << threads << " depth " << depth << " single "
                         << single << " overlap " << overlap);
            int64_t total = 0;
            for (int64_t bytes : sizes) {
              round_trip(engine, file, 4096 * (seed % 3), bytes, seed);
              ++seed;
              total += bytes;
            }
            EXPECT_EQ(engine.bytes_written(), total);
            EXPECT_EQ(engine.bytes_read(), total);
          }
        }
      }
    }
  }
}

TEST_P(EngineTest, BackendIsTheOneAskedFor) {
  IoEngine engine(options(), GetParam());
  EXPECT_STREQ(engine.backend_name(), io_backend_name(GetParam()));
  EXPECT_EQ(engine.options().block_size, kBlock);
}

TEST_P(EngineTest, SeveralOperationsInFlightAtOnce) {
  IoEngine engine(options(2, 4), GetParam());
  constexpr int kOps = 6;
  constexpr int64_t kBytes = 5 * kBlock + 4096;
  SwapFile file = SwapFile::create(dir_ / "many.swp", 2 * kOps * kBytes);
  std::vector<AlignedBuffer> old_data, new_data, read_back;
  for (int i = 0; i < kOps; ++i) {
    old_data.push_back(random_buffer(kBytes, 100 + i));
    new_data.push_back(random_buffer(kBytes, 200 + i));
    read_back.emplace_back(kBytes);
    engine.write(file, 2 * i * kBytes, old_data[i].data(), kBytes).wait();
  }
  // Read region 2i while writing region 2i+1, all queued before any wait.
  std::vector<IoTicket> tickets;
  for (int i = 0; i < kOps; ++i) {
    tickets.push_back(engine.read(file, 2 * i * kBytes, read_back[i].data(), kBytes));
    tickets.push_back(engine.write(file, (2 * i + 1) * kBytes, new_data[i].data(), kBytes));
  }
  for (IoTicket& t : tickets) t.wait();
  for (IoTicket& t : tickets) EXPECT_TRUE(t.done());
  for (int i = 0; i < kOps; ++i) {
    EXPECT_TRUE(same_bytes(old_data[i], read_back[i], kBytes)) << "op " << i;
    AlignedBuffer check(kBytes);
    engine.read(file, (2 * i + 1) * kBytes, check.data(), kBytes).wait();
    EXPECT_TRUE(same_bytes(new_data[i], check, kBytes)) << "op " << i;
  }
  EXPECT_EQ(engine.bytes_written(), 2 * kOps * kBytes);
  EXPECT_EQ(engine.bytes_read(), 2 * kOps * kBytes);
}

TEST_P(EngineTest, DestructorWaitsForOperationsInFlight) {
  SwapFile file = SwapFile::create(dir_ / "drain.swp", 8 * kBlock);
  AlignedBuffer data = random_buffer(8 * kBlock, 7);
  {
    IoEngine engine(options(3, 2), GetParam());
    engine.write(file, 0, data.data(), 8 * kBlock);  // ticket dropped unwaited
  }
  IoEngine engine(options(), GetParam());
  AlignedBuffer back(8 * kBlock);
  engine.read(file, 0, back.data(), 8 * kBlock).wait();
  EXPECT_TRUE(same_bytes(data, back, 8 * kBlock));
}

TEST_P(EngineTest, MisalignedDirectTransfersAreRejected) {
  IoEngine engine(options(), GetParam());
  SwapFile file = SwapFile::create(dir_ / "align.swp", 4 * kBlock);
  ASSERT_TRUE(file.direct());
  AlignedBuffer buffer(2 * kBlock);
  char* base = buffer.as<char>();
  std::string msg = error_of([&] { engine.read(file, 0, base + 1, 4096); });
  EXPECT_TRUE(contains(msg, "buffer address"));
  EXPECT_TRUE(contains(msg, file.path()));
  EXPECT_TRUE(contains(msg, "read"));
  msg = error_of([&] { engine.write(file, 512, base, 4096); });
  EXPECT_TRUE(contains(msg, "file offset (512) is not a multiple of 4096"));
  EXPECT_TRUE(contains(msg, "write"));
  msg = error_of([&] { engine.write(file, 0, base, 1000); });
  EXPECT_TRUE(contains(msg, "size (1000) is not a multiple of 4096"));
  EXPECT_EQ(engine.bytes_written() + engine.bytes_read(), 0);
}

TEST_P(EngineTest, ReadPastTheEndNamesFileOperationAndOffset) {
  IoEngine engine(options(), GetParam());
  SwapFile file = SwapFile::create(dir_ / "short.swp", 16 * 4096);
  AlignedBuffer buffer(4 * 4096);
  IoTicket t = engine.read(file, 16 * 4096, buffer.data(), 4 * 4096);
  std::string msg = error_of([&] { t.wait(); });
  EXPECT_TRUE(contains(msg, "read of " + file.path() +
                                " at byte 65536 returned 0 of 16384 "
                                "bytes: file ended"));
  EXPECT_EQ(error_of([&] { t.wait(); }), msg);  // waiting again throws again
  // Straddling the end: the first 4096 bytes arrive (a partial completion), then the file ends.
  t = engine.read(file, 15 * 4096, buffer.data(), 2 * 4096);
  msg = error_of([&] { t.wait(); });
  EXPECT_TRUE(contains(msg, "read of " + file.path() +
                                " at byte 61440 returned 4096 of 8192 "
                                "bytes: file ended"));
  EXPECT_EQ(engine.bytes_read(), 4096);
}

TEST_P(EngineTest, InjectedWriteFailureNamesFileAndOperation) {
  SwapFile file = SwapFile::create(dir_ / "inject.swp", 8 * kBlock);
  AlignedBuffer data = random_buffer(8 * kBlock, 3);
  ScopedEnv fail("ZRT_AIO_FAIL", "write:3");
  IoEngine engine(options(), GetParam());
  IoTicket t = engine.write(file, 0, data.data(), 8 * kBlock);
  const std::string msg = error_of([&] { t.wait(); });
  EXPECT_TRUE(contains(msg, "write of " + file.path() + " at byte " + std::to_string(2 * kBlock) +
                                " (65536 bytes) failed: "
                                "Input/output error"));
  EXPECT_TRUE(t.done());
  EXPECT_EQ(error_of([&] { t.wait(); }), msg);
  // Only the third request fails: the same write again succeeds.
  engine.write(file, 0, data.data(), 8 * kBlock).wait();
}

TEST_P(EngineTest, InjectedReadFailureNamesFileAndOperation) {
  SwapFile file = SwapFile::create(dir_ / "inject.swp", 4 * kBlock);
  AlignedBuffer data(4 * kBlock);
  ScopedEnv fail("ZRT_AIO_FAIL", "read:1");
  IoEngine engine(options(2, 2), GetParam());
  engine.write(file, 0, data.data(), 4 * kBlock).wait();  // writes do not count
  const std::string msg = error_of([&] { engine.read(file, 0, data.data(), 4 * kBlock).wait(); });
  EXPECT_TRUE(contains(msg, "read of " + file.path()));
  EXPECT_TRUE(contains(msg, "failed: Input/output error"));
  engine.read(file, 0, data.data(), 4 * kBlock).wait();
}

TEST_P(EngineTest, BufferedFileTakesUnalignedTransfers) {
  // A file system that refuses O_DIRECT is simulated by opening buffered (Note [Buffered
  // fallback]); the engine must then accept any address, offset and size.
  SwapFile file = SwapFile::create(dir_ / "buffered.swp", 3 * kBlock, /*allow_direct=*/false);
  EXPECT_FALSE(file.direct());
  EXPECT_EQ(file.bytes(), 3 * kBlock);
  IoEngine engine(options(3, 2), GetParam());
  const int64_t bytes = 2 * kBlock + 1234;
  AlignedBuffer out = random_buffer(bytes + 1, 11);
  AlignedBuffer in(bytes + 1);
  engine.write(file, 777, out.as<char>() + 1, bytes).wait();
  engine.read(file, 777, in.as<char>() + 1, bytes).wait();
  EXPECT_EQ(std::memcmp(out.as<char>() + 1, in.as<char>() + 1, bytes), 0);
  EXPECT_EQ(engine.bytes_read(), bytes);
}

TEST_P(EngineTest, EmptyOperationIsDoneAtOnce) {
  IoEngine engine(options(3), GetParam());
  SwapFile file = SwapFile::create(dir_ / "empty.swp", 0);
  IoTicket t = engine.read(file, 0, nullptr, 0);
  EXPECT_TRUE(t.done());
  t.wait();
  IoTicket none;
  EXPECT_TRUE(none.done());
  none.wait();
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kLibaio,
                                           IoBackend::kPosix),
                         [](const auto& info) { return std::string(io_backend_name(info.param)); });

TEST(EngineOptions, InvalidOptionsNameTheOptionAndValue) {
  AioOptions o;
  o.block_size = 1000;
  EXPECT_TRUE(contains(error_of([&] { IoEngine e(o); }),
                       "aio.block_size: expected a positive multiple of 4096, got 1000"));
  o.block_size = -4096;
  EXPECT_TRUE(contains(error_of([&] { IoEngine e(o); }), "aio.block_size: expected a positive"));
  o.block_size = int64_t{2} << 30;
  EXPECT_TRUE(contains(error_of([&] { IoEngine e(o); }),
                       "aio.block_size: expected at most 1073741824 (1 GiB), got 2147483648"));
  o = AioOptions{};
  o.queue_depth = 0;
  EXPECT_TRUE(contains(error_of([&] { IoEngine e(o); }), "aio.queue_depth: expected 1"));
  o = AioOptions{};
  o.thread_count = 0;
  EXPECT_TRUE(contains(error_of([&] { IoEngine e(o); }), "aio.thread_count"));
  EXPECT_TRUE(contains(error_of([&] { IoEngine e(o); }), "got 0"));
}

TEST(EngineOptions, EnvironmentChoosesTheBackendForAuto) {
  {
    ScopedEnv env("ZRT_AIO_BACKEND", "posix");
    EXPECT_STREQ(IoEngine(AioOptions{}).backend_name(), "posix");
  }
  {
    // An explicit backend wins over the variable (which names one that may not even start).
    ScopedEnv env("ZRT_AIO_BACKEND", "libaio");
    EXPECT_STREQ(IoEngine(AioOptions{}, IoBackend::kPosix).backend_name(), "posix");
  }
  {
    ScopedEnv env("ZRT_AIO_BACKEND", "spdk");
    EXPECT_TRUE(contains(error_of([] { IoEngine e(AioOptions{}); }),
                         "ZRT_AIO_BACKEND: expected auto, io_uring, libaio or posix, got 'spdk'"));
  }
  const std::string name = IoEngine(AioOptions{}).backend_name();
  EXPECT_TRUE(name == "io_uring" || name == "libaio" || name == "posix") << name;
}

TEST(EngineOptions, MalformedFaultInjectionIsRejected) {
  for (const char* bad : {"write", "read:0", "sync:1", "read:x", "read:"}) {
    ScopedEnv env("ZRT_AIO_FAIL", bad);
    EXPECT_TRUE(contains(
        error_of([] { IoEngine e(AioOptions{}); }),
        std::string("ZRT_AIO_FAIL: expected <read|write>:<N> with N >= 1, got '") + bad + "'"));
  }
}

}  // namespace
}  // namespace zrt::aio
