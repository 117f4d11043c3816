// SwapFile and AlignedBuffer: creation, reservation, resume, deletion while open, a full file
// system (ENOSPC on a small tmpfs), and kAuto's fallback when a seccomp filter forbids io_uring.
#include "aio/swap_file.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "aio/aligned_buffer.h"
#include "aio/io_engine.h"
#include "core/error.h"
#include "core/logging.h"
#include "tests/aio/aio_test_util.h"
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace zrt::aio {
namespace {

using test::contains;
using test::error_of;
using test::ScratchDir;

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

TEST(AlignedBuffer, IsAlignedZeroedPaddedAndMovable) {
  EXPECT_EQ(align_up(0), 0);
  EXPECT_EQ(align_up(1), 4096);
  EXPECT_EQ(align_up(4096), 4096);
  EXPECT_EQ(align_up(4097), 8192);
  EXPECT_EQ(align_up(5, 8), 8);
  AlignedBuffer a(10000);
  EXPECT_EQ(a.size(), 10000);
  EXPECT_EQ(a.capacity(), 12288);
  EXPECT_TRUE(is_aligned(a.data()));
  for (int64_t i = 0; i < a.capacity(); ++i) ASSERT_EQ(a.as<unsigned char>()[i], 0) << i;
  void* p = a.data();
  AlignedBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
  a = std::move(b);
  EXPECT_EQ(a.data(), p);
  EXPECT_TRUE(AlignedBuffer().empty());
  EXPECT_TRUE(contains(error_of([] { AlignedBuffer(-1); }), "got -1"));
}

TEST(AlignedBuffer, AllocationFailureNamesTheSize) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer aborts on an impossible allocation instead of failing it";
#endif
  const int64_t huge = int64_t{1} << 60;
  EXPECT_TRUE(contains(error_of([&] { AlignedBuffer x(huge, BufferInit::kUninitialized); }),
                       "cannot allocate " + std::to_string(huge) + " bytes"));
}

TEST(SwapFile, CreateReservesRoundedUpSizeWithDirectIo) {
  ScratchDir dir;
  SwapFile file = SwapFile::create(dir / "a.swp", 10000);
  EXPECT_TRUE(file.is_open());
  EXPECT_TRUE(file.direct());
  EXPECT_EQ(file.bytes(), 12288);
  EXPECT_EQ(file.path(), dir / "a.swp");
  EXPECT_EQ(file_size(file.path()), 12288);
  EXPECT_TRUE(::fcntl(file.fd(), F_GETFL) & O_DIRECT);
  EXPECT_TRUE(::fcntl(file.fd(), F_GETFD) & FD_CLOEXEC);
  file.check_present();
  // Creating again truncates and reserves anew.
  SwapFile again = SwapFile::create(dir / "a.swp", 4096);
  EXPECT_EQ(file_size(again.path()), 4096);
  SwapFile moved = std::move(again);
  EXPECT_FALSE(again.is_open());
  EXPECT_TRUE(moved.is_open());
  moved.remove();
  EXPECT_EQ(file_size(dir / "a.swp"), -1);
  moved.remove();  // already gone: no error
}

TEST(SwapFile, CreateInAMissingFolderNamesThePath) {
  EXPECT_TRUE(contains(error_of([] { SwapFile::create("/nonexistent_zrt/x.swp", 4096); }),
                       "swap file /nonexistent_zrt/x.swp: cannot create: No such file"));
}

TEST(SwapFile, OpenExistingChecksPresenceAndSize) {
  ScratchDir dir;
  { SwapFile::create(dir / "r.swp", 8192); }
  SwapFile file = SwapFile::open_existing(dir / "r.swp", 8192);
  EXPECT_TRUE(file.direct());
  EXPECT_EQ(file.bytes(), 8192);
  EXPECT_TRUE(contains(error_of([&] { SwapFile::open_existing(dir / "r.swp", 8193); }),
                       "swap file " + (dir / "r.swp") + " has 8192 bytes, expected at least 8193"));
  EXPECT_TRUE(contains(error_of([&] { SwapFile::open_existing(dir / "missing.swp", 1); }),
                       "swap file " + (dir / "missing.swp") + ": cannot open: No such file"));
}

TEST(SwapFile, DeletionWhileInUseIsDetected) {
  ScratchDir dir;
  SwapFile file = SwapFile::create(dir / "d.swp", 4096);
  file.check_present();
  ASSERT_EQ(::unlink(file.path().c_str()), 0);
  EXPECT_TRUE(contains(error_of([&] { file.check_present(); }),
                       "swap file " + file.path() + " was deleted while in use"));
}

// A 1 MiB tmpfs mounted for the test (root only), unmounted in TearDown.
class FullDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
    if (::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, "size=1m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs on " << dir_.path() << ": " << std::strerror(errno);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  ScratchDir dir_;
  bool mounted_ = false;
};

TEST_F(FullDisk, NoSpaceNamesThePathAndTheCause) {
  const std::string path = dir_ / "big.swp";
  const std::string msg = error_of([&] { SwapFile::create(path, 4 << 20); });
  EXPECT_TRUE(contains(msg, "swap file " + path + ": cannot reserve 4194304 bytes"));
  EXPECT_TRUE(contains(msg, "No space left"));
  EXPECT_EQ(file_size(path), -1);                   // the half-made file is removed again
  SwapFile::create(dir_ / "small.swp", 256 << 10);  // what fits still works
}

// Runs `body` in a child process whose seccomp filter makes the listed syscalls fail with EPERM
// (as a container's profile does); returns the child's exit status (0: body returned true).
int run_with_syscalls_denied(std::initializer_list<long> denied,
                             const std::function<bool()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<sock_filter> prog = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr))};
    for (long nr : denied) {
      prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
      prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
    }
    prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
      ::_exit(3);
    }
    bool ok = false;
    try {
      ok = body();
    } catch (...) {
    }
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// What kAuto chose and what it warned, in the child.
bool auto_falls_back_to(const std::string& expected, const std::string& dir) {
  std::string warned;
  set_log_sink([&](LogLevel, const std::string& line) { warned += line; });
  IoEngine engine(AioOptions{});
  SwapFile file = SwapFile::create(dir + "/fallback.swp", 1 << 20);
  AlignedBuffer out = test::random_buffer(1 << 20, 5), in(1 << 20);
  engine.write(file, 0, out.data(), 1 << 20).wait();
  engine.read(file, 0, in.data(), 1 << 20).wait();
  const bool explicit_refused = error_of([] {
                                  IoEngine e(AioOptions{}, IoBackend::kIoUring);
                                }).find("cannot start") != std::string::npos;
  return engine.backend_name() == expected && test::same_bytes(out, in, 1 << 20) &&
         warned.find("io_uring") != std::string::npos && explicit_refused;
}

TEST(AutoBackend, FallsBackWhenSeccompForbidsIoUring) {
  for (IoBackend b : {IoBackend::kIoUring, IoBackend::kLibaio}) {
    const std::string why = error_of([b] { IoEngine e(AioOptions{}, b); });
    if (why.find("cannot start") != std::string::npos) GTEST_SKIP() << why;
  }
  ScratchDir dir;
  EXPECT_EQ(run_with_syscalls_denied({__NR_io_uring_setup},
                                     [&] { return auto_falls_back_to("libaio", dir.path()); }),
            0);
  EXPECT_EQ(run_with_syscalls_denied({__NR_io_uring_setup, __NR_io_setup},
                                     [&] { return auto_falls_back_to("posix", dir.path()); }),
            0);
}

}  // namespace
}  // namespace zrt::aio
