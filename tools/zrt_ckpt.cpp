// zrt-ckpt: looks into, checks and converts DeepSpeed-layout checkpoints (ZeroRT's or DeepSpeed's).
//
//   zrt-ckpt inspect DIR [--tag T] [--json]
//   zrt-ckpt verify DIR [--tag T] [--allow_no_manifest]
//   zrt-ckpt to-fp32 DIR OUT [--tag T] [--safetensors] [--exclude_frozen_parameters]
//   zrt-ckpt to-universal DIR OUT [--tag T]
//   zrt-ckpt --help, zrt-ckpt help, zrt-ckpt SUBCOMMAND --help
//
// Options are parsed with cxxopts, like the other zrt-* tools' (a path starting with '-' goes
// after "--").
// DIR is a save_dir with `latest` (an HF checkpoint-N folder is one), or a tag folder. Exit codes
// (core/tool_main.h): 0 ok, 1 usage, 2 bad output path, 3 damaged or inconsistent checkpoint.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "checkpoint/consolidate.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "checkpoint/pt/pt_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "checkpoint/universal.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/tool_main.h"
#include "tools/ckpt_files.h"
#include "tools/ckpt_inspect.h"
#include "tools/ckpt_verify.h"
#include <sys/stat.h>

namespace {

using zrt::UsageError;
using zrt::tools::CheckpointLocation;
using Args = std::vector<std::string>;

// One option of a subcommand. `names` is cxxopts' spelling ("long,alias"); the dashed aliases
// keep the spellings the tool accepted before it used cxxopts. `arg` is nullptr for a switch.
struct Flag {
  const char* names;
  const char* arg;
  const char* help;
};

// A subcommand: its positional arguments (all required), its options and its usage text.
struct Command {
  const char* name;
  std::vector<const char*> positional;
  const char* synopsis;  // the usage line after "zrt-ckpt NAME"
  const char* about;
  std::vector<Flag> flags;
};

const Flag kTagFlag = {"tag", "T", "the tag folder to read (default: the one DIR/latest names)"};

const Command kInspect = {
    "inspect",
    {"DIR"},
    "DIR [--tag T] [--json]",
    "Shows the ZeRO stage, world size, dtype, steps, parameter count, optimizer, writer and\n"
    "every file of a checkpoint tag with its size and keys (tensor bytes are not read).",
    {kTagFlag, {"json", nullptr, "print the inspection as JSON"}}};

const Command kVerify = {
    "verify",
    {"DIR"},
    "DIR [--tag T] [--allow_no_manifest]",
    "Checks completeness (zrt_manifest.json: every file with its size and CRC-32), that every\n"
    "file reads, that the files agree on stage and world size, that shapes match param_shapes\n"
    "and that every rank's partition adds up. Exit 0, or 3 with the list of problems.",
    {kTagFlag,
     {"allow_no_manifest,allow-no-manifest", nullptr,
      "check a checkpoint written by DeepSpeed (which writes no manifest)"}}};

const Command kToFp32 = {
    "to-fp32",
    {"DIR", "OUT"},
    "DIR OUT [--tag T] [--safetensors] [--exclude_frozen_parameters]",
    "Consolidates the ZeRO partitions into full fp32 weights (DeepSpeed's zero_to_fp32) and\n"
    "writes OUT atomically as a torch.save state dict, or as safetensors with --safetensors or\n"
    "an OUT ending in .safetensors. OUT may be a directory: then pytorch_model.bin or\n"
    "model.safetensors is written into it.",
    {kTagFlag,
     {"safetensors", nullptr, "write safetensors (also chosen by an OUT ending in .safetensors)"},
     {"exclude_frozen_parameters,exclude-frozen-parameters", nullptr,
      "leave out the parameters with requires_grad false"}}};

const Command kToUniversal = {
    "to-universal",
    {"DIR", "OUT"},
    "DIR OUT [--tag T]",
    "Writes DeepSpeed's universal checkpoint of a ZeRO stage 1-3 checkpoint (what DeepSpeed's\n"
    "ds_to_universal writes: zero/<param>/{fp32,exp_avg,exp_avg_sq,step}.pt, zero/optimizer_state.pt\n"
    "and the model states) into OUT (a new folder, or an earlier conversion, which it replaces),\n"
    "one parameter at a time, and names it in OUT's parent's latest_universal. Load it with\n"
    "\"checkpoint\": {\"load_universal\": true}, in ZeroRT or DeepSpeed, at any world size. OUT is\n"
    "usually DIR/global_stepN_universal.",
    {kTagFlag}};

const char kDirNote[] =
    "DIR is a save_dir with a 'latest' file (e.g. an HF checkpoint-N folder) or a tag folder.\n";

std::string usage() {
  std::string text = "usage: zrt-ckpt <subcommand> ...\n       zrt-ckpt <subcommand> --help\n";
  text += "  inspect   what a checkpoint holds\n"
          "  verify    check a checkpoint for damage and consistency\n"
          "  to-fp32   consolidate into one fp32 state dict (.pt or .safetensors)\n"
          "  to-universal  write DeepSpeed's universal checkpoint (any world size loads it)\n";
  text += kDirNote;
  for (const Command* c : {&kInspect, &kVerify, &kToFp32, &kToUniversal}) {
    text += zrt::str("\nusage: zrt-ckpt ", c->name, " ", c->synopsis, "\n", c->about, "\n");
  }
  return text;
}

cxxopts::Options make_options(const Command& c) {
  cxxopts::Options options(zrt::str("zrt-ckpt ", c.name), zrt::str(c.about, "\n"));
  std::string positional;
  for (const char* p : c.positional) positional += zrt::str(p, " ");
  options.custom_help(positional + "[options]");
  options.set_width(100);
  auto add = options.add_options();
  add("h,help", "print this help");
  for (const Flag& f : c.flags) {
    if (f.arg != nullptr) {
      add(f.names, f.help, cxxopts::value<std::string>(), f.arg);
    } else {
      add(f.names, f.help);
    }
  }
  return options;
}

[[noreturn]] void usage_error(const Command& c, const std::string& what) {
  throw UsageError(zrt::str(c.name, ": ", what, "\nusage: zrt-ckpt ", c.name, " ", c.synopsis,
                            "\n(zrt-ckpt ", c.name, " --help describes every option)"));
}

// cxxopts' message for a bad command line, naming the option as it is typed ('--tag', '-x').
std::string option_message(const cxxopts::exceptions::exception& e) {
  std::string what = e.what();
  const std::string open = "\u2018", close = "\u2019";  // cxxopts' quotes outside Windows
  const size_t a = what.find(open);
  const size_t b = a == std::string::npos ? a : what.find(close, a + open.size());
  const std::string name =
      b == std::string::npos ? "" : what.substr(a + open.size(), b - a - open.size());
  const std::string typed = name.size() == 1 ? "-" + name : "--" + name;
  if (!name.empty() && dynamic_cast<const cxxopts::exceptions::no_such_option*>(&e)) {
    return zrt::str("unknown option '", typed, "'");
  }
  if (!name.empty() && dynamic_cast<const cxxopts::exceptions::invalid_option_syntax*>(&e)) {
    return zrt::str("unknown option '", name, "'");
  }
  if (!name.empty() && dynamic_cast<const cxxopts::exceptions::missing_argument*>(&e)) {
    return zrt::str(typed, " needs a value");
  }
  if (!name.empty() && dynamic_cast<const cxxopts::exceptions::incorrect_argument_type*>(&e)) {
    return zrt::str("a switch takes no value (or true/false), got '", name, "'");
  }
  for (const std::string& q : {open, close}) {
    for (size_t at = what.find(q); at != std::string::npos; at = what.find(q, at)) {
      what.replace(at, q.size(), "'");
    }
  }
  return what;
}

// The command line of one subcommand, parsed by cxxopts; the positional arguments are the
// arguments cxxopts does not match (also those after "--", for a path that starts with '-').
struct Parsed {
  cxxopts::ParseResult result;
  std::vector<std::string> positional;
  bool help = false;

  std::optional<std::string> option(const std::string& name) const {
    if (result.count(name) == 0) return std::nullopt;
    return result[name].as<std::string>();
  }
  bool flag(const std::string& name) const { return result[name].as<bool>(); }
};

// Parses `args` (after the subcommand). With --help, prints the subcommand's help: `help` is set
// and the positional arguments are not checked. Bad command lines throw UsageError (exit 1).
Parsed parse_args(const Command& c, const Args& args) {
  cxxopts::Options options = make_options(c);
  std::vector<const char*> argv = {"zrt-ckpt"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  Parsed p;
  try {
    p.result = options.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    usage_error(c, option_message(e));
  }
  if (p.result["help"].as<bool>()) {
    std::printf("%s\n%s", options.help().c_str(), kDirNote);
    p.help = true;
    return p;
  }
  p.positional = p.result.unmatched();
  if (p.positional.size() < c.positional.size()) {
    usage_error(c, zrt::str("missing argument ", c.positional[p.positional.size()]));
  }
  if (p.positional.size() > c.positional.size()) {
    usage_error(c, zrt::str("unexpected argument '", p.positional[c.positional.size()],
                            "' (it takes ", c.positional.size() == 1 ? "only DIR" : "DIR and OUT",
                            ")"));
  }
  return p;
}

std::optional<std::string> tag_option(const Parsed& p) { return p.option("tag"); }

int run_inspect(const Args& args) {
  const Parsed p = parse_args(kInspect, args);
  if (p.help) return 0;
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
  const Parsed p = parse_args(kVerify, args);
  if (p.help) return 0;
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

// Checks a ZeroRT tag against its manifest (sizes and CRC-32) before converting it; a tag without
// one (DeepSpeed's) is read as it is, with a note.
void check_before_converting(const CheckpointLocation& loc) {
  zrt::ckpt::PosixStorage storage;
  if (storage.exists(zrt::ckpt::join_path(loc.tag_dir, zrt::ckpt::kManifestFile))) {
    zrt::ckpt::verify_tag(loc.save_dir, loc.tag, zrt::ckpt::VerifyLevel::kChecksums);
  } else {
    std::fprintf(stderr,
                 "zrt-ckpt: note: %s has no %s (written by DeepSpeed, or an unfinished save): "
                 "its files are read without a completeness check\n",
                 loc.tag_dir.c_str(), zrt::ckpt::kManifestFile);
  }
}

int run_to_fp32(const Args& args) {
  const Parsed p = parse_args(kToFp32, args);
  if (p.help) return 0;
  const bool safetensors =
      p.flag("safetensors") || zrt::ends_with(p.positional[1], ".safetensors");
  const std::string out = output_path(p.positional[1], safetensors);
  const CheckpointLocation loc = zrt::tools::locate_checkpoint(p.positional[0], tag_option(p));
  check_before_converting(loc);
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

int run_to_universal(const Args& args) {
  const Parsed p = parse_args(kToUniversal, args);
  if (p.help) return 0;
  const std::string& out = p.positional[1];
  if (!is_dir(zrt::ckpt::parent_dir(out))) {
    throw zrt::Error(zrt::str(out, ": the output folder's parent does not exist"));
  }
  const CheckpointLocation loc = zrt::tools::locate_checkpoint(p.positional[0], tag_option(p));
  check_before_converting(loc);
  const zrt::ckpt::UniversalWriteStats stats = zrt::ckpt::write_universal(loc.tag_dir, out);
  std::printf("wrote %s (universal checkpoint): %lld parameters, %lld files, %s, from %s\n",
              out.c_str(), static_cast<long long>(stats.params),
              static_cast<long long>(stats.files), zrt::tools::format_bytes(stats.bytes).c_str(),
              loc.tag_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zrt::run_subcommand_tool(
      "zrt-ckpt", argc, argv,
      {{"inspect", run_inspect},
       {"verify", run_verify},
       {"to-fp32", run_to_fp32},
       {"to-universal", run_to_universal}},
      usage());
}
