// zrt::initialize: the user entry point, like deepspeed.initialize. From a DeepSpeed config
// (path, JSON text, urlsafe base64 or a parsed Json) it builds the Engine. (From HF-style
// TrainingArguments with --deepspeed, the HF-Trainer "auto" rules: hf/initialize.h.)
//
//   auto model = std::make_shared<MyModel>();
//   auto engine = zrt::initialize(model, "ds_config.json");
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/comm.h"
#include "core/json.h"
#include "runtime/engine.h"

namespace zrt {

struct InitializeOptions {
  // The communicator; default comm::init_from_env() (MPI under mpirun, else a world of one).
  std::shared_ptr<comm::Comm> comm;
  EngineOptions engine;
};

// Communicator options for a config: the environment's (ZRT_COMM_TIMEOUT, ZRT_DEBUG_COLLECTIVES)
// overridden by the config's "zrt" section, parsed strictly (config::resolve_comm_options: a bad
// value is a ConfigError naming the key). For programs that create the communicator themselves:
// comm::init_from_env(comm_options_for_config(config)).
comm::CommOptions comm_options_for_config(const Json& config);

// Collective: every rank must call it. `config` is a file path, a JSON text or a urlsafe-base64
// JSON text (spec §1.1). Throws ConfigError listing every problem of the config.
std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model,
                                   const std::string& config, InitializeOptions options = {});
// The same for a string literal (which would otherwise convert to both std::string and Json).
std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const char* config,
                                   InitializeOptions options = {});
std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Json& config,
                                   InitializeOptions options = {});

}  // namespace zrt
