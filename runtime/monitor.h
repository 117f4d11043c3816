// DeepSpeed's csv_monitor on rank 0: one CSV file per event at
// <output_path>/<job_name>/<event name with '/' replaced by '_'>.csv, header "step,<last part of
// the name>", one "step,value" row appended per event (the x axis is global samples, as in
// DeepSpeed: Train/Samples/train_loss, Train/Samples/lr, Train/Samples/loss_scale).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zrt {

struct MonitorEvent {
  std::string name;
  double value = 0;
  int64_t step = 0;
};

class CsvMonitor {
 public:
  // output_path "" means the current directory, as in DeepSpeed.
  CsvMonitor(std::string output_path, std::string job_name);
  void write_events(const std::vector<MonitorEvent>& events);
  std::string file_of(const std::string& event) const;

 private:
  std::string dir_;
  std::map<std::string, bool> started_;
};

}  // namespace zrt
