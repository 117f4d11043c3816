#include "launch/banner_filter.h"

#include <regex>

namespace zrt::launch {
namespace {

bool is_rule(const std::string& line) {
  return line.size() >= 20 && line.find_first_not_of('-') == std::string::npos;
}

// "<tool>: error: ..." or "<tool>: internal error ..." (core/tool_main.cpp's run_tool).
bool is_error_line(const std::string& line) {
  static const std::regex kError(R"(^[A-Za-z0-9_.-]+: (error: |internal error))");
  return std::regex_search(line, kError);
}

// The first text line of an Open MPI banner about the job ending.
bool starts_ending_banner(const std::string& line) {
  for (const char* prefix :
       {"MPI_ABORT was invoked", "Primary job  terminated normally",
        "Primary job terminated normally", "mpirun detected that one or more processes exited"}) {
    if (line.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// "[host:pid] [[job,0],0] ORTE_ERROR_LOG: ... in file util/show_help.c at line N": Open MPI's
// help system failing to deliver a banner while the job is being torn down.
bool is_show_help_failure(const std::string& line) {
  return line.find("ORTE_ERROR_LOG") != std::string::npos &&
         line.find("show_help.c") != std::string::npos;
}

bool is_help_aggregate(const std::string& line) {
  return line.find("has sent help message help-mpi-api.txt / mpi-abort") != std::string::npos ||
         line.find("have sent help message help-mpi-api.txt / mpi-abort") != std::string::npos ||
         line.find("\"orte_base_help_aggregate\" to 0") != std::string::npos;
}

}  // namespace

std::vector<std::string> BannerFilter::feed(const std::string& line) {
  std::vector<std::string> out;
  if (is_error_line(line)) error_seen_ = true;
  if (in_dropped_banner_) {
    ++dropped_;
    if (is_rule(line)) in_dropped_banner_ = false;  // the banner's closing rule
    return out;
  }
  if (holding_rule_) {
    holding_rule_ = false;
    if (error_seen_ && starts_ending_banner(line)) {
      dropped_ += 2;  // the held rule and this line
      in_dropped_banner_ = true;
      return out;
    }
    out.push_back(held_);
  }
  if (error_seen_ && is_rule(line)) {
    holding_rule_ = true;
    held_ = line;
    return out;
  }
  if (error_seen_ && (is_help_aggregate(line) || is_show_help_failure(line))) {
    ++dropped_;
    return out;
  }
  out.push_back(line);
  return out;
}

std::vector<std::string> BannerFilter::finish() {
  std::vector<std::string> out;
  if (holding_rule_) out.push_back(held_);
  holding_rule_ = false;
  return out;
}

}  // namespace zrt::launch
