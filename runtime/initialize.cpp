#include "runtime/initialize.h"

#include "comm/init.h"
#include "config/load.h"
#include "config/resolved.h"
#include "core/error.h"

namespace zrt {

comm::CommOptions comm_options_for_config(const Json& config);

namespace {

// The communicator initialize() creates gets the config's "zrt" section (comm_timeout,
// debug_collectives) on top of the environment's; a communicator passed in keeps its own.
std::shared_ptr<comm::Comm> comm_or_default(std::shared_ptr<comm::Comm> comm, const Json& config) {
  if (comm != nullptr) return comm;
  return comm::init_from_env(comm_options_for_config(config));
}

}  // namespace

comm::CommOptions comm_options_for_config(const Json& config) {
  return config::resolve_comm_options(config);  // strict, as resolve_config reads it
}

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model,
                                   const std::string& config, InitializeOptions options) {
  return initialize(std::move(model), config::load_config_source(config), std::move(options));
}

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const char* config,
                                   InitializeOptions options) {
  return initialize(std::move(model), std::string(config), std::move(options));
}

std::unique_ptr<Engine> initialize(std::shared_ptr<torch::nn::Module> model, const Json& config,
                                   InitializeOptions options) {
  std::shared_ptr<comm::Comm> comm = comm_or_default(std::move(options.comm), config);
  config::ResolveOptions ro;
  ro.world_size = comm->size();
  ro.client_optimizer = options.engine.client_optimizer.has_value();
  config::ResolvedConfig resolved = config::resolve_config(config, ro);
  return std::make_unique<Engine>(std::move(model), std::move(resolved), std::move(comm),
                                  std::move(options.engine));
}

}  // namespace zrt
