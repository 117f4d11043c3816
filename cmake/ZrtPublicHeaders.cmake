# The public headers: the contract a program built against an installed ZeroRT compiles with.
# They are installed as <prefix>/include/zrt/<module>/<header> (the umbrella zrt/zrt.h as
# <zrt/zrt.h>), their includes rewritten to <zrt/...> names; no other header is installed.
# The list is exactly what zrt/zrt.h reaches through the project's includes, and no public
# header is marked internal or includes a third-party header other than LibTorch's and
# nlohmann/json's (scripts/check_public_headers.py, CTest public_headers_check). A header joins
# the list when the API needs it, never because an include happened to pull it in.
set(ZRT_PUBLIC_HEADERS
  zrt/zrt.h
  aio/options.h
  checkpoint/options.h
  checkpoint/value.h
  comm/comm.h
  comm/comm_stats.h
  comm/init.h
  comm/options.h
  config/ds_config.h
  config/hf_trainer.h
  config/resolved.h
  config/training_args.h
  core/dtype.h
  core/error.h
  core/json.h
  core/logging.h
  core/tool_main.h
  hf/adapter.h
  hf/initialize.h
  hf/pretrained.h
  hf/trainer.h
  optim/options.h
  peft/lora.h
  runtime/engine.h
  runtime/engine_options.h
  runtime/gathered_parameters.h
  runtime/initialize.h
  sched/options.h
  zero/activation_checkpoint.h
  zero/leaf_modules.h
  zero/options.h
  zero/sequence_parallel.h
  zero/shard_unit.h)
