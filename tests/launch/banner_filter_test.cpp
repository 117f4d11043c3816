// BannerFilter on its own: Open MPI's job-ending banners are dropped only after a rank reported
// its own error; everything else passes unchanged and in order.
#include "launch/banner_filter.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace zrt::launch {
namespace {

const std::string kRule(74, '-');

std::vector<std::string> filter(const std::vector<std::string>& lines) {
  BannerFilter f;
  std::vector<std::string> out;
  for (const std::string& l : lines) {
    for (std::string& o : f.feed(l)) out.push_back(std::move(o));
  }
  for (std::string& o : f.finish()) out.push_back(std::move(o));
  return out;
}

const std::vector<std::string> kAbortBanner = {
    kRule,
    "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",
    "with errorcode 2.",
    "",
    "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.",
    kRule,
    "[vm:11574] 1 more process has sent help message help-mpi-api.txt / mpi-abort",
    "[vm:11574] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error "
    "messages"};

TEST(BannerFilter, DropsTheAbortBannerAfterARanksError) {
  std::vector<std::string> in = {"training...", "zrt-train: error: bad key 'x' in ds.json"};
  in.insert(in.end(), kAbortBanner.begin(), kAbortBanner.end());
  in.push_back("after");
  EXPECT_EQ(filter(in), (std::vector<std::string>{
                            "training...", "zrt-train: error: bad key 'x' in ds.json", "after"}));
}

TEST(BannerFilter, DropsShowHelpErrorLogLinesAfterARanksError) {
  const std::string orte =
      "[vm:11574] [[52103,0],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer in "
      "file util/show_help.c at line 501";
  EXPECT_EQ(filter({"zrt-train: error: checkpoint-4: not a checkpoint", orte, "after"}),
            (std::vector<std::string>{"zrt-train: error: checkpoint-4: not a checkpoint", "after"}));
  EXPECT_EQ(filter({orte}), std::vector<std::string>{orte}) << "no error of ours: keep it";
}

TEST(BannerFilter, DropsTheNonZeroExitBanners) {
  const std::vector<std::string> in = {
      "zrt-train: error: no such file",
      kRule,
      "Primary job  terminated normally, but 1 process returned",
      "a non-zero exit code. Per user-direction, the job has been aborted.",
      kRule,
      kRule,
      "mpirun detected that one or more processes exited with non-zero status, thus causing",
      "  Exit code:    2",
      kRule};
  EXPECT_EQ(filter(in), (std::vector<std::string>{"zrt-train: error: no such file"}));
}

TEST(BannerFilter, KeepsEverythingWithoutAnErrorLineAndOtherBanners) {
  EXPECT_EQ(filter(kAbortBanner), kAbortBanner)
      << "a program of its own aborted: keep Open MPI's word";
  const std::vector<std::string> other = {"zrt-train: error: link down", kRule,
                                          "ORTE has lost communication with a remote daemon.",
                                          kRule, kRule};
  EXPECT_EQ(filter(other), other) << "banners other than the job-ending ones stay";
}

}  // namespace
}  // namespace zrt::launch
