// zrt-ckpt: looks into, checks and converts DeepSpeed-layout checkpoints (ZeroRT's or DeepSpeed's).
//
//   zrt-ckpt inspect DIR [--tag T] [--json]
//   zrt-ckpt verify DIR [--tag T] [--allow_no_manifest]
//   zrt-ckpt to-fp32 DIR OUT [--tag T] [--safetensors] [--exclude_frozen_parameters]
//
// DIR is a save_dir with `latest` (an HF checkpoint-N folder is one), or a tag folder. Exit codes
// (core/tool_main.h): 0 ok, 1 usage, 2 bad output path, 3 damaged or inconsistent checkpoint.
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/consolidate.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "core/error.h"
#include "core/tool_main.h"
#include "tools/ckpt_files.h"
#include "tools/ckpt_inspect.h"
#include "tools/ckpt_verify.h"
#include <sys/stat.h>

namespace {

using zrt::UsageError;
using zrt::tools::CheckpointLocation;
using Args = std::vector<std::string>;

// The command line of one subcommand: positional arguments, --name VALUE options, --flags.
struct Parsed {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  std::map<std::string, bool> flags;
  bool help = false;

  std::optional<std::string> option(const std::string& name) const {
    auto it = options.find(name);
    return it == options.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  bool flag(const std::string& name) const { return flags.count(name) != 0; }
};

Parsed parse_args(const Args& args, const std::vector<std::string>& value_options,
                  const std::vector<std::string>& flag_options, size_t num_positional,
                  const std::string& usage) {
  auto known = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  Parsed p;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      p.help = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      p.positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    std::replace(name.begin(), name.end(), '-', '_');
    if (known(value_options, name)) {
      if (!value) {
        if (i + 1 >= args.size()) throw UsageError(zrt::str("--", name, " needs a value\n", usage));
        value = args[++i];
      }
      p.options[name] = *value;
    } else if (known(flag_options, name)) {
      if (value) throw UsageError(zrt::str("--", name, " takes no value\n", usage));
      p.flags[name] = true;
    } else {
      throw UsageError(zrt::str("unknown option '", a, "'\n", usage));
    }
  }
  if (!p.help && p.positional.size() != num_positional) {
    throw UsageError(zrt::str("expected ", num_positional, " argument",
                              num_positional == 1 ? "" : "s", ", got ", p.positional.size(), "\n",
                              usage));
  }
  return p;
}

const char* kInspectUsage =
    "usage: zrt-ckpt inspect DIR [--tag T] [--json]\n"
    "  Shows the ZeRO stage, world size, dtype, steps, parameter count, optimizer, writer and\n"
    "  every file of a checkpoint tag with its size and keys (tensor bytes are not read).\n";
const char* kVerifyUsage =
    "usage: zrt-ckpt verify DIR [--tag T] [--allow_no_manifest]\n"
    "  Checks completeness (zrt_manifest.json: every file with its size and CRC-32), that every\n"
    "  file reads, that the files agree on stage and world size, that shapes match param_shapes\n"
    "  and that every rank's partition adds up. Exit 0, or 3 with the list of problems.\n"
    "  --allow_no_manifest checks a checkpoint written by DeepSpeed (which writes no manifest).\n";
const char* kToFp32Usage =
    "usage: zrt-ckpt to-fp32 DIR OUT [--tag T] [--safetensors] [--exclude_frozen_parameters]\n"
    "  Consolidates the ZeRO partitions into full fp32 weights (DeepSpeed's zero_to_fp32) and\n"
    "  writes OUT atomically as a torch.save state dict, or as safetensors with --safetensors or\n"
    "  an OUT ending in .safetensors. OUT may be a directory: then pytorch_model.bin or\n"
    "  model.safetensors is written into it.\n";

std::string usage() {
  return std::string(
             "usage: zrt-ckpt <subcommand> ...\n"
             "  inspect   what a checkpoint holds\n"
             "  verify    check a checkpoint for damage and consistency\n"
             "  to-fp32   consolidate into one fp32 state dict (.pt or .safetensors)\n"
             "DIR is a save_dir with a 'latest' file (e.g. an HF checkpoint-N folder) or a tag "
             "folder.\n\n") +
         kInspectUsage + kVerifyUsage + kToFp32Usage;
}

std::optional<std::string> tag_option(const Parsed& p) { return p.option("tag"); }

int run_inspect(const Args& args) {
  const Parsed p = parse_args(args, {"tag"}, {"json"}, 1, kInspectUsage);
  if (p.help) return std::printf("%s", kInspectUsage), 0;
  const CheckpointLocation loc = zrt::tools::locate_checkpoint(p.positional[0], tag_option(p));
  const zrt::tools::Inspection in = zrt::tools::inspect_checkpoint(loc);
  if (p.flag("json")) {
    std::printf("%s\n", zrt::tools::inspection_json(in).dump(2).c_str());
  } else {
    std::printf("%s", zrt::tools::inspection_text(in).c_str());
  }
  if (!in.problems.empty()) {
    std::string msg = zrt::str(loc.tag_dir, ": ", in.problems.size(), " unreadable file(s):");
    for (const std::string& s : in.problems) msg += "\n  - " + s;
    throw zrt::CheckpointError(msg);
  }
  return 0;
}

int run_verify(const Args& args) {
  const Parsed p = parse_args(args, {"tag"}, {"allow_no_manifest"}, 1, kVerifyUsage);
  if (p.help) return std::printf("%s", kVerifyUsage), 0;
  const CheckpointLocation loc = zrt::tools::locate_checkpoint(p.positional[0], tag_option(p));
  zrt::tools::VerifyOptions options;
  options.allow_no_manifest = p.flag("allow_no_manifest");
  const zrt::tools::VerifyReport r = zrt::tools::verify_checkpoint(loc, options);
  for (const std::string& n : r.notes) std::printf("note: %s\n", n.c_str());
  if (!r.problems.empty()) {
    std::string msg = zrt::str(loc.tag_dir, " failed verification (", r.problems.size(), " problem",
                               r.problems.size() == 1 ? "" : "s", "):");
    for (const std::string& s : r.problems) msg += "\n  - " + s;
    throw zrt::CheckpointError(msg);
  }
  std::printf(
      "ok: %s: ZeRO stage %d, world size %lld, %zu files (%s)%s\n", loc.tag_dir.c_str(),
      r.zero_stage, static_cast<long long>(r.world_size), r.files,
      zrt::tools::format_bytes(r.bytes).c_str(),
      r.parameters > 0 ? zrt::str(", ", r.parameters, " parameters reassemble from the partitions").c_str()
                     : "");
  return 0;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Where to-fp32 writes: OUT itself, or a file named like zero_to_fp32's inside the folder OUT.
// Throws zrt::Error (exit 2) for an output path that cannot be written.
std::string output_path(const std::string& out, bool safetensors) {
  if (is_dir(out)) {
    return zrt::ckpt::join_path(out, safetensors ? "model.safetensors" : "pytorch_model.bin");
  }
  const std::string parent = zrt::ckpt::parent_dir(out);
  if (!is_dir(parent)) {
    throw zrt::Error(zrt::str(out, ": the output folder ", parent, " does not exist"));
  }
  struct stat st {};
  if (::lstat(out.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw zrt::Error(zrt::str(out, ": exists and is not a regular file"));
  }
  return out;
}

int run_to_fp32(const Args& args) {
  const Parsed p =
      parse_args(args, {"tag"}, {"safetensors", "exclude_frozen_parameters"}, 2, kToFp32Usage);
  if (p.help) return std::printf("%s", kToFp32Usage), 0;
  const bool safetensors = p.flag("safetensors") || ends_with(p.positional[1], ".safetensors");
  const std::string out = output_path(p.positional[1], safetensors);
  const CheckpointLocation loc = zrt::tools::locate_checkpoint(p.positional[0], tag_option(p));
  zrt::ckpt::PosixStorage storage;
  if (storage.exists(zrt::ckpt::join_path(loc.tag_dir, zrt::ckpt::kManifestFile))) {
    zrt::ckpt::verify_tag(loc.save_dir, loc.tag, zrt::ckpt::VerifyLevel::kChecksums);
  } else {
    std::fprintf(stderr,
                 "zrt-ckpt: note: %s has no %s (written by DeepSpeed, or an unfinished save): "
                 "its files are read without a completeness check\n",
                 loc.tag_dir.c_str(), zrt::ckpt::kManifestFile);
  }
  zrt::ckpt::ConsolidateOptions options;
  options.exclude_frozen_parameters = p.flag("exclude_frozen_parameters");
  const zrt::ckpt::NamedTensors tensors =
      zrt::ckpt::load_fp32_state_dict(loc.save_dir, loc.tag, options);
  int64_t elements = 0;
  for (const auto& [name, t] : tensors) elements += t.numel();
  const zrt::ckpt::FileInfo info =
      safetensors ? zrt::ckpt::save_safetensors(tensors, out, {{"format", "pt"}})
                  : zrt::ckpt::save_pt(zrt::ckpt::ordered_dict_of(tensors), out);
  std::printf("wrote %s (%s): %zu tensors, %lld elements, %s, from %s\n", out.c_str(),
              safetensors ? "safetensors" : "torch.save state dict", tensors.size(),
              static_cast<long long>(elements), zrt::tools::format_bytes(info.size).c_str(),
              loc.tag_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zrt::run_subcommand_tool(
      "zrt-ckpt", argc, argv,
      {{"inspect", run_inspect}, {"verify", run_verify}, {"to-fp32", run_to_fp32}}, usage());
}
