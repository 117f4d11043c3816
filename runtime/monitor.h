// DeepSpeed's monitors on rank 0. csv_monitor: one CSV file per event at
// <output_path>/<job_name>/<event name with '/' replaced by '_'>.csv, header "step,<last part of
// the name>", one "step,value" row appended per event (the x axis is global samples, as in
// DeepSpeed: Train/Samples/train_loss, Train/Samples/lr, Train/Samples/loss_scale).
// tensorboard: one event file in <output_path>/<job_name>/ with the same events as scalars
// (tag = the event name, step = global samples), flushed after every write.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zrt {

class EventFileWriter;

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

class TensorBoardMonitor {
 public:
  TensorBoardMonitor(const std::string& output_path, const std::string& job_name);
  ~TensorBoardMonitor();
  void write_events(const std::vector<MonitorEvent>& events);
  const std::string& file() const;

 private:
  std::unique_ptr<EventFileWriter> writer_;
};

}  // namespace zrt
