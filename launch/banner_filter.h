// BannerFilter: what zrt-launch shows of mpirun's standard error. Once a rank has reported its
// own error ("zrt-train: error: ..."), Open MPI's banners about the job ending (MPI_ABORT was
// invoked, a process exited with a non-zero status, the "N more processes have sent help
// message" lines, and ORTE_ERROR_LOG lines from its show_help.c) only bury it: they are dropped. Every other line passes unchanged, and before
// any error line nothing is dropped (Note [One error line per job] in core/tool_main.cpp).
#pragma once

#include <string>
#include <vector>

namespace zrt::launch {

class BannerFilter {
 public:
  // Feeds one line (without its newline); returns the lines to show now, in order.
  std::vector<std::string> feed(const std::string& line);
  // The lines still held at the end of the stream.
  std::vector<std::string> finish();
  // Lines dropped so far.
  int dropped() const { return dropped_; }

 private:
  bool error_seen_ = false;
  // A banner begins with a line of dashes; it is held until its first text line shows which.
  bool holding_rule_ = false;
  std::string held_;
  bool in_dropped_banner_ = false;
  int dropped_ = 0;
};

}  // namespace zrt::launch
