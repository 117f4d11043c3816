#include "runtime/monitor.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "report/event_file.h"

namespace zrt {

CsvMonitor::CsvMonitor(std::string output_path, std::string job_name) {
  std::filesystem::path base =
      output_path.empty() ? std::filesystem::path(".") : std::filesystem::path(output_path);
  dir_ = (base / job_name).string();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  ZRT_CHECK(!ec, "csv_monitor: cannot create ", dir_, ": ", ec.message());
}

std::string CsvMonitor::file_of(const std::string& event) const {
  std::string file = event;
  for (char& c : file) {
    if (c == '/') c = '_';
  }
  return (std::filesystem::path(dir_) / (file + ".csv")).string();
}

void CsvMonitor::write_events(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) {
    const std::string path = file_of(e.name);
    const bool first = !started_[e.name];
    std::ofstream out(path, first ? std::ios::trunc : std::ios::app);
    ZRT_CHECK(out.good(), "csv_monitor: cannot write ", path);
    if (first) {
      const auto slash = e.name.rfind('/');
      out << "step," << (slash == std::string::npos ? e.name : e.name.substr(slash + 1)) << "\n";
      started_[e.name] = true;
    }
    out << e.step << "," << e.value << "\n";
  }
}

TensorBoardMonitor::TensorBoardMonitor(const std::string& output_path,
                                       const std::string& job_name) {
  const std::filesystem::path base =
      output_path.empty() ? std::filesystem::path(".") : std::filesystem::path(output_path);
  writer_ = std::make_unique<EventFileWriter>((base / job_name).string());
}

TensorBoardMonitor::~TensorBoardMonitor() = default;

void TensorBoardMonitor::write_events(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) writer_->add_scalar(e.name, e.value, e.step);
  writer_->flush();
}

const std::string& TensorBoardMonitor::file() const { return writer_->path(); }

}  // namespace zrt
