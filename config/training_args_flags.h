// TrainingArguments on a command line, with HF's spelling (`--per_device_train_batch_size 4`,
// `--fp16`, `--fp16 true`, `--fp16=false`), for the zrt-* programs that parse flags with cxxopts:
// add_training_arguments() to the program's cxxopts::Options, then parse_training_arguments() on
// the result (after join_bool_flag_values() on argv). Not installed: cxxopts is the tools'
// choice, not the library's.
#pragma once

#include <string>
#include <vector>

#include "config/training_args.h"

namespace cxxopts {
class Options;
class ParseResult;
}  // namespace cxxopts

namespace zrt::config {

// Rewrites "--flag value" into "--flag=value" for the boolean training flags when value is a
// boolean word (true/false/yes/no/1/0/...), so that cxxopts (which treats a flag with an
// implicit value as taking no separate argument) accepts HF's spelling.
std::vector<std::string> join_bool_flag_values(const std::vector<std::string>& args);

// Adds every TrainingArguments flag to `options` (group "Training arguments").
void add_training_arguments(cxxopts::Options& options);

// Reads the flags added by add_training_arguments(); throws UsageError on bad values, then
// runs validate().
TrainingArguments parse_training_arguments(const cxxopts::ParseResult& result);

}  // namespace zrt::config
