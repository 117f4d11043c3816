// Internal interface between resolve.cpp and the per-section resolvers (resolve_*.cpp). Each
// reads its section(s) of the root object, records problems in Diagnostics and fills its part
// of ResolvedConfig. Not part of the public API.
#pragma once

#include "config/diagnostics.h"
#include "config/resolved.h"
#include "core/json.h"

namespace zrt::config::detail {

// zero_optimization (object or legacy bool) and the top-level allgather_size. Runs first: the
// precision defaults depend on the stage.
void resolve_zero_section(const Json& root, Diagnostics& diag, ResolvedConfig& out);

// fp16, bf16 / bfloat16, amp; sets model_dtype.
void resolve_precision_sections(const Json& root, Diagnostics& diag, ResolvedConfig& out);

// optimizer.
void resolve_optimizer_section(const Json& root, Diagnostics& diag, ResolvedConfig& out);

// scheduler.
void resolve_scheduler_section(const Json& root, Diagnostics& diag, ResolvedConfig& out);

// checkpoint, data_types, tensorboard, csv_monitor, zrt.
void resolve_misc_sections(const Json& root, Diagnostics& diag, ResolvedConfig& out);
// The "zrt" section and the environment's communicator variables (part of the above).
void resolve_zrt(const Json& root, Diagnostics& diag, comm::CommOptions& out);

// The section object at `key`: nullptr when absent or null, and when invalid ("auto", or not an
// object), which is reported in `diag`.
const Json* section_object(const Json& root, const char* key, Diagnostics& diag);

// The "auto" string.
inline bool is_auto_value(const Json& value) { return value.is_string() && value == "auto"; }

}  // namespace zrt::config::detail
