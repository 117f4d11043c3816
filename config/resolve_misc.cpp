// Resolves the smaller sections: "checkpoint" (docs/DEEPSPEED.md §1.9), "data_types",
// "tensorboard" / "csv_monitor", and ZeroRT's own "zrt" section (communication timeout and
// collective fingerprint checks; the ZRT_COMM_TIMEOUT / ZRT_DEBUG_COLLECTIVES environment
// variables give the defaults, the config overrides them).
#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <optional>
#include <string>

#include "config/keys.h"
#include "config/py_format.h"
#include "config/resolve_sections.h"
#include "config/section_reader.h"
#include "core/env.h"
#include "core/error.h"

namespace zrt::config::detail {
namespace {

// checkpoint.writer: DeepSpeed's fast checkpoint writer. Its values are checked as DeepSpeed
// checks them; ZeroRT writes the same files with its own writer.
void resolve_checkpoint_writer(const Json& section, Diagnostics& diag) {
  SectionReader w(section, "checkpoint.writer", diag);
  w.check_unknown_keys(keys::kCheckpointWriter, /*strict=*/true);
  const auto upper_one_of = [&](const char* key, std::initializer_list<const char*> valid) {
    auto value = w.get_string(key);
    if (!value) return;
    std::string upper = *value;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    std::string names;
    for (const char* v : valid) {
      if (upper == v) return;
      names += str(names.empty() ? "" : ", ", "'", v, "'");
    }
    diag.error_text(str("writer contains invalid value ", upper, " for ", key,
                         ", expecting one of [", names, "]"));
  };
  upper_one_of("type", {"MOCK", "PYTHON", "FAST"});
  upper_one_of("data_parallel", {"REPLICA", "SOCKET", "MACHINE"});
  w.get_int("io_buffer_size", 1);
  w.get_bool("io_buffer_double");
  w.get_bool("show_statistics");
  w.get_bool("decoupled");
  w.get_int("io_multiplier", 1);
  diag.note(
      "checkpoint.writer: DeepSpeed's fast checkpoint writer; ZeroRT writes the same files with "
      "its own writer: no effect");
}

void resolve_checkpoint(const Json& root, Diagnostics& diag, ckpt::CheckpointOptions& out) {
  const Json* s = section_object(root, "checkpoint", diag);
  if (!s) return;
  SectionReader r(*s, "checkpoint", diag);
  r.check_unknown_keys(keys::kCheckpoint, /*strict=*/true);
  if (auto mode = r.get_string("tag_validation")) {
    std::string upper = *mode;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (upper == "WARN") {
      out.tag_validation = ckpt::TagValidation::kWarn;
    } else if (upper == "IGNORE") {
      out.tag_validation = ckpt::TagValidation::kIgnore;
    } else if (upper == "FAIL") {
      out.tag_validation = ckpt::TagValidation::kFail;
    } else {
      r.error("tag_validation", str("Checkpoint config contains invalid tag_validation value of ",
                                    upper, ", expecting one of ['WARN', 'IGNORE', 'FAIL']"));
    }
  }
  if (auto v = r.get_bool("use_node_local_storage")) out.use_node_local_storage = *v;
  if (auto v = r.get_bool("load_universal")) out.load_universal = *v;
  if (const Json* pw = r.get_object("parallel_write")) {
    SectionReader w(*pw, "checkpoint.parallel_write", diag);
    w.check_unknown_keys(keys::kCheckpointParallelWrite, /*strict=*/true);
    if (const Json* stage = w.get("pipeline_stage")) {
      if (stage->is_boolean()) {
        out.parallel_write_pipeline_stage = stage->get<bool>();
      } else {
        diag.error_text(str("checkpoint::parallel_write::pipeline_stage value of '", py_str(*stage),
                            "' is invalid, expecting: true or false"));
      }
    }
  }
  if (auto zip = r.get_bool("checkpoint_serialization"); zip && !*zip) {
    diag.note(
        "checkpoint.checkpoint_serialization: false makes DeepSpeed write torch's legacy (non-zip) "
        "format; ZeroRT writes the zip format, which torch.load and ZeroRT read alike");
  }
  if (const Json* writer = r.get_object("writer")) resolve_checkpoint_writer(*writer, diag);
}

// data_types.param_dtype must name the dtype the fp16/bf16 flags give (DeepSpeed asserts the
// same); buffer_dtype is checked against what ZeroRT does with floating buffers (casts them to
// the training dtype); keep_in_fp32_modules is "auto" or a list of name patterns.
void resolve_param_and_buffer_dtypes(SectionReader& r, const ResolvedConfig& out) {
  const DType model = out.fp16.enabled ? DType::kFloat16
                      : out.bf16.enabled ? DType::kBFloat16
                                         : DType::kFloat32;
  const auto read = [&](const char* key) -> std::optional<DType> {
    auto name = r.get_string(key);
    if (!name) return std::nullopt;
    std::string text = *name;
    if (text.rfind("torch.", 0) == 0) text = text.substr(6);
    auto dtype = parse_dtype(text);
    if (!dtype) {
      r.error(key, str("expected \"fp32\", \"fp16\" or \"bf16\", got \"", *name, "\""));
    }
    return dtype;
  };
  if (auto p = read("param_dtype"); p && *p != model) {
    r.error("param_dtype",
            str("data_types.param_dtype='", r.object()["param_dtype"].get<std::string>(),
                "' conflicts with the enabled precision mode (model dtype ", dtype_name(model),
                "). Set the matching fp16/bf16 'enabled' flag or omit data_types.param_dtype."));
  }
  if (auto b = read("buffer_dtype"); b && *b != model) {
    r.error("buffer_dtype",
            str("ZeroRT casts floating buffers to the training dtype (", dtype_name(model),
                "); another buffer_dtype is not supported by ZeroRT: omit it or set it to "
                "match"));
  }
  const auto keep_it = r.object().find("keep_in_fp32_modules");
  const bool keep_given = keep_it != r.object().end() && !keep_it->is_null() &&
                          !(keep_it->is_string() && *keep_it == "auto");  // "auto": the default
  if (const Json* keep = keep_given ? &*keep_it : nullptr) {
    bool ok = keep->is_array();
    for (const Json& item : ok ? *keep : Json::array()) ok = ok && item.is_string();
    if (!ok) {
      r.error("keep_in_fp32_modules",
              str("must be \"auto\" or a list of name patterns, got ", describe_value(*keep)));
    } else if (!keep->empty()) {
      r.diag().warn(
          "data_types.keep_in_fp32_modules: ZeroRT casts every floating buffer to the training "
          "dtype; the patterns have no effect");
    }
  }
}

void resolve_data_types(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  const Json* s = section_object(root, "data_types", diag);
  if (!s) return;
  SectionReader r(*s, "data_types", diag);
  r.check_unknown_keys(keys::kDataTypes, /*strict=*/true);
  resolve_param_and_buffer_dtypes(r, out);
  auto name = r.get_string("grad_accum_dtype");
  if (!name) return;
  std::string text = *name;
  if (text.rfind("torch.", 0) == 0) text = text.substr(6);
  if (auto dtype = parse_dtype(text)) {
    out.grad_accum_dtype = *dtype;
  } else {
    r.error(
        "grad_accum_dtype",
        str("expected \"fp32\", \"fp16\" or \"bf16\" (or float32, float16, bfloat16, half, "
            "float), got \"",
            *name, "\"", text == "int8" ? "; int8 accumulation is not supported by ZeroRT" : ""));
  }
}

void resolve_monitor(const Json& root, const char* key, Diagnostics& diag, MonitorConfig& out) {
  const Json* s = section_object(root, key, diag);
  if (!s) return;
  SectionReader r(*s, key, diag);
  r.check_unknown_keys(keys::kMonitor, /*strict=*/true);
  if (auto v = r.get_bool("enabled")) out.enabled = *v;
  if (auto v = r.get_string("output_path")) out.output_path = *v;
  if (auto v = r.get_string("job_name")) out.job_name = *v;
}

// DeepSpeed's activation_checkpointing section. The keys that need a model-parallel group
// (partition_activations and contiguous_memory_optimization, which DeepSpeed applies only with
// one) and number_checkpoints (which sizes contiguous_memory_optimization's buffers) are read and
// checked, and have no effect, as in DeepSpeed without an mpu; a note says so when one is set.
void resolve_activation_checkpointing(const Json& root, Diagnostics& diag,
                                      zero::ActivationCheckpointOptions& out) {
  const Json* s = section_object(root, "activation_checkpointing", diag);
  if (!s) return;
  SectionReader r(*s, "activation_checkpointing", diag);
  r.check_unknown_keys(keys::kActivationCheckpointing, /*strict=*/true);
  if (auto v = r.get_bool("partition_activations")) out.partition_activations = *v;
  if (auto v = r.get_bool("contiguous_memory_optimization")) {
    out.contiguous_memory_optimization = *v;
  }
  if (r.has("number_checkpoints") && !(*s)["number_checkpoints"].is_null()) {
    if (auto v = r.get_int("number_checkpoints", 1)) out.number_checkpoints = *v;
  }
  if (auto v = r.get_bool("synchronize_checkpoint_boundary")) {
    out.synchronize_checkpoint_boundary = *v;
  }
  if (auto v = r.get_bool("cpu_checkpointing")) out.cpu_checkpointing = *v;
  if (auto v = r.get_bool("profile")) out.profile = *v;
  for (const char* key : {"partition_activations", "contiguous_memory_optimization"}) {
    const bool on = std::string(key) == "partition_activations"
                        ? out.partition_activations
                        : out.contiguous_memory_optimization;
    if (on) {
      diag.note(str("activation_checkpointing.", key,
                    ": no effect without a model-parallel group (as in DeepSpeed without an mpu)"));
    }
  }
  if (out.synchronize_checkpoint_boundary) {
    diag.note(
        "activation_checkpointing.synchronize_checkpoint_boundary: no effect (ZeroRT does "
        "not synchronize a device at region boundaries)");
  }
  if (out.number_checkpoints) {
    diag.note(
        "activation_checkpointing.number_checkpoints: sizes DeepSpeed's contiguous "
        "activation buffers (contiguous_memory_optimization); no effect here");
  }
}

// DeepSpeed's "aio" section: how NVMe offload reads and writes (aio/options.h).
void resolve_aio(const Json& root, Diagnostics& diag, aio::AioOptions& out) {
  const Json* s = section_object(root, "aio", diag);
  if (!s) return;
  SectionReader r(*s, "aio", diag);
  r.check_unknown_keys(keys::kAio, /*strict=*/true);
  if (auto v = r.get_int("block_size", 1)) {
    if (*v % 4096 != 0) {
      r.error("block_size", str("expected a positive multiple of 4096 (O_DIRECT requests are "
                                "page-aligned), got ",
                                *v));
    } else {
      out.block_size = *v;
    }
  }
  if (auto v = r.get_int("queue_depth", 1)) out.queue_depth = *v;
  const std::optional<int64_t> intra = r.get_int("intra_op_parallelism", 1);
  const std::optional<int64_t> threads = r.get_int("thread_count", 1);
  if (intra && threads && *intra != *threads) {
    r.error("thread_count", str("is the older name of intra_op_parallelism; they differ (",
                                *threads, " and ", *intra, ")"));
  } else if (intra || threads) {
    out.thread_count = intra ? *intra : *threads;
  }
  if (auto v = r.get_bool("single_submit")) out.single_submit = *v;
  if (auto v = r.get_bool("overlap_events")) out.overlap_events = *v;
  if (auto v = r.get_bool("use_gds"); v && *v) {
    r.error("use_gds", "GPUDirect Storage is not supported by ZeroRT; use false");
  }
}

}  // namespace

void resolve_zrt(const Json& root, Diagnostics& diag, comm::CommOptions& out) {
  try {
    if (auto t = env::get_double(env::kCommTimeout)) {
      if (!(*t > 0)) {
        diag.error(env::kCommTimeout, str("expected a positive number of seconds, got ", *t));
      } else {
        out.timeout_seconds = *t;
      }
    }
    if (auto d = env::get_bool(env::kDebugCollectives)) out.debug_collectives = *d;
  } catch (const Error& e) {
    diag.error_text(e.what());
  }
  const Json* s = section_object(root, "zrt", diag);
  if (!s) return;
  SectionReader r(*s, "zrt", diag);
  r.check_unknown_keys(keys::kZrt, /*strict=*/true);
  if (auto v = r.get_number("comm_timeout", NumberRange::positive())) out.timeout_seconds = *v;
  if (auto v = r.get_bool("debug_collectives")) out.debug_collectives = *v;
}

void resolve_misc_sections(const Json& root, Diagnostics& diag, ResolvedConfig& out) {
  resolve_checkpoint(root, diag, out.checkpoint);
  resolve_data_types(root, diag, out);
  resolve_monitor(root, "tensorboard", diag, out.tensorboard);
  resolve_monitor(root, "csv_monitor", diag, out.csv_monitor);
  resolve_activation_checkpointing(root, diag, out.activation_checkpointing);
  resolve_aio(root, diag, out.aio);
  resolve_zrt(root, diag, out.comm);
}

}  // namespace zrt::config::detail
