// The ZeroRT public header: everything a training program needs.
//
//   #include <zrt/zrt.h>
//   auto engine = zrt::initialize(model, "ds_config.json");   // under mpirun
//   engine->backward(loss); engine->step();
#pragma once

#include "comm/init.h"                    // zrt::comm::init_from_env
#include "config/training_args.h"         // zrt::config::TrainingArguments
#include "core/error.h"                   // zrt::Error and subclasses
#include "core/tool_main.h"               // zrt::run_tool (exit codes)
#include "hf/adapter.h"                   // zrt::save_adapter, zrt::load_adapter (PEFT folders)
#include "hf/initialize.h"                // zrt::initialize from TrainingArguments
#include "hf/pretrained.h"                // zrt::load_pretrained, zrt::save_pretrained
#include "hf/trainer.h"                   // zrt::Trainer
#include "peft/lora.h"                    // zrt::lora::apply (LoRA adapters)
#include "runtime/engine.h"               // zrt::Engine
#include "runtime/gathered_parameters.h"  // zrt::GatheredParameters
#include "runtime/initialize.h"           // zrt::initialize
#include "zero/leaf_modules.h"            // zrt::set_z3_leaf_modules (ZeRO-3 leaves)
#include "zero/sequence_parallel.h"       // zrt::SequenceParallel (Ulysses)
#include "zero/shard_unit.h"              // zrt::ShardUnit (ZeRO-3 units)
