// libFuzzer target: DeepSpeed config text -> parse_config_text -> resolve_config (world sizes 1
// and 3) -> the HF-Trainer path (prepare_trainer_config) -> to_json -> resolve again, which must
// give the same config. A zrt::Error other than InternalError is a clean rejection; anything else
// (another exception, an InternalError, a sanitizer report, a round trip that changes the config)
// is a bug and aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/ds_config.h"
#include "config/hf_plan.h"
#include "config/load.h"
#include "config/resolved.h"
#include "config/training_args.h"
#include "core/error.h"
#include "core/logging.h"

namespace {

using zrt::Json;

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "fuzz_config: BUG: %s\n", what.c_str());
  std::abort();
}

// Runs `body`; clean zrt errors are fine, everything else escapes (libFuzzer reports it).
template <typename F>
void expect_clean(F&& body) {
  try {
    body();
  } catch (const zrt::InternalError& e) {
    bug(std::string("InternalError: ") + e.what());
  } catch (const zrt::Error&) {
  }
}

void resolve_round_trip(const Json& json, int world_size) {
  expect_clean([&] {
    zrt::config::ResolveOptions options;
    options.world_size = world_size;
    const zrt::config::ResolvedConfig resolved = zrt::config::resolve_config(json, options);
    const Json dumped = zrt::config::to_json(resolved);
    Json again;
    try {
      again = zrt::config::to_json(zrt::config::resolve_config(dumped, options));
    } catch (const zrt::Error& e) {
      bug(std::string("the dump of a resolved config does not resolve: ") + e.what() + "\n" +
          dumped.dump());
    }
    if (again != dumped)
      bug("resolve(to_json(resolved)) differs:\n" + dumped.dump() + "\n" + again.dump());
  });
}

void hf_path(const Json& json, bool fp16, bool bf16) {
  expect_clean([&] {
    zrt::config::TrainingArguments args;
    args.max_steps = 10;
    args.fp16 = fp16;
    args.bf16 = bf16;
    zrt::config::TrainerConfigOptions options;
    options.world_size = 2;
    options.model.hidden_size = 64;
    zrt::config::prepare_trainer_config(args, options, zrt::config::DeepSpeedConfig(json));
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zrt::set_log_level(zrt::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto decoded = zrt::config::decode_base64(text)) {
    expect_clean([&] { zrt::config::parse_config_text(*decoded, "<base64>"); });
  }
  Json json;
  try {
    json = zrt::config::parse_config_text(text, "<fuzz>");
  } catch (const zrt::InternalError& e) {
    bug(std::string("InternalError: ") + e.what());
  } catch (const zrt::Error&) {
    return 0;
  }
  resolve_round_trip(json, 1);
  resolve_round_trip(json, 3);
  hf_path(json, (size & 1) != 0, (size & 2) != 0);
  return 0;
}
