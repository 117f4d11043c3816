// zrt-launch argument parsing with cxxopts (see cli.h). Numbers are read as strings and checked
// here so that the message names the flag (cxxopts' own message does not).
#include "launch/cli.h"

#include <exception>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "core/error.h"

namespace zrt::launch {
namespace {

struct Flag {
  const char* names;  // cxxopts spelling: "short,long,alias"
  const char* arg;    // value placeholder; nullptr for a switch
  const char* help;
};

const Flag kFlags[] = {
    {"n,np", "N", "total number of ranks (without a hostfile: ranks on this machine)"},
    {"num_gpus,num-gpus", "N", "ranks per node, one per GPU slot (first N slots of each host)"},
    {"num_nodes,num-nodes", "N", "use the first N hosts of the hostfile"},
    {"H,hostfile", "FILE",
     "hostfile of 'HOST slots=N' lines (default: /job/hostfile if it exists, else the Slurm "
     "allocation, else this machine)"},
    {"i,include", "SPEC", "hosts/slots to use, e.g. 'worker-0:0,1@worker-1'"},
    {"e,exclude", "SPEC", "hosts/slots to leave out, same syntax as --include"},
    {"master_addr,master-addr", "ADDR", "exported to every rank as MASTER_ADDR"},
    {"timeout", "SECONDS", "end the whole job after SECONDS (mpirun --timeout; exit code 110)"},
    {"oversubscribe", nullptr, "always pass --oversubscribe (added anyway when ranks > cores)"},
    {"launcher_args,launcher-args", "ARGS",
     "more mpirun options, as one shell-quoted string (see the example)"},
    {"dry-run,dry_run", nullptr, "print the environment and the mpirun command, do not run"},
    {"mpirun", "PATH", "the mpirun to run (default: mpirun on PATH)"},
    {"h,help", nullptr, "print this help"},
};

cxxopts::Options make_options() {
  cxxopts::Options options("zrt-launch",
                           "Starts a ZeroRT (or any) program on every rank with mpirun.");
  options.custom_help("[options] -- PROGRAM [ARGS...]");
  options.set_width(100);
  auto add = options.add_options();
  for (const Flag& f : kFlags) {
    if (f.arg != nullptr) {
      add(f.names, f.help, cxxopts::value<std::string>(), f.arg);
    } else {
      add(f.names, f.help);
    }
  }
  return options;
}

int parse_count(const cxxopts::ParseResult& result, const char* flag) {
  if (result.count(flag) == 0) return -1;
  const std::string text = result[flag].as<std::string>();
  std::size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZRT_CHECK_AS(UsageError, used == text.size() && used > 0 && value >= 1 && value <= 1000000, "--",
               flag, " '", text, "' is not a positive integer");
  return static_cast<int>(value);
}

std::string get_string(const cxxopts::ParseResult& result, const char* flag) {
  if (result.count(flag) == 0) return "";
  const std::string value = result[flag].as<std::string>();
  ZRT_CHECK_AS(UsageError, !value.empty(), "--", flag, " needs a non-empty value");
  return value;
}

}  // namespace

CliArgs parse_launch_args(const std::vector<std::string>& args) {
  std::vector<std::string> flags;
  CliArgs cli;
  bool after_separator = false;
  for (const std::string& a : args) {
    if (after_separator) {
      cli.options.program.push_back(a);
    } else if (a == "--") {
      after_separator = true;
    } else {
      flags.push_back(a == "-np" ? "--np" : a);
    }
  }
  std::vector<const char*> argv = {"zrt-launch"};
  for (const std::string& f : flags) argv.push_back(f.c_str());
  cxxopts::Options options = make_options();
  cxxopts::ParseResult result;
  try {
    result = options.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (result.count("help")) {
    cli.help = true;
    return cli;
  }
  ZRT_CHECK_AS(UsageError, result.unmatched().empty(), "unexpected argument '",
               result.unmatched().empty() ? "" : result.unmatched().front(),
               "': put the program after '--' (zrt-launch [options] -- PROGRAM ARGS...)");
  LaunchOptions& o = cli.options;
  o.np = parse_count(result, "np");
  o.num_gpus = parse_count(result, "num_gpus");
  o.num_nodes = parse_count(result, "num_nodes");
  const int timeout = parse_count(result, "timeout");
  o.timeout_s = timeout > 0 ? timeout : 0;
  o.hostfile = get_string(result, "hostfile");
  o.include = get_string(result, "include");
  o.exclude = get_string(result, "exclude");
  o.master_addr = get_string(result, "master_addr");
  o.mpirun = get_string(result, "mpirun");
  if (result.count("launcher_args")) {
    o.launcher_args =
        split_shell_words(result["launcher_args"].as<std::string>(), "--launcher_args");
  }
  o.oversubscribe = result.count("oversubscribe") > 0;
  o.dry_run = result.count("dry-run") > 0;
  ZRT_CHECK_AS(UsageError, o.np < 0 || o.num_gpus < 0,
               "--np and --num_gpus are exclusive (got --np ", o.np, " and --num_gpus ", o.num_gpus,
               ")");
  ZRT_CHECK_AS(UsageError, o.include.empty() || o.exclude.empty(),
               "--include and --exclude are exclusive");
  ZRT_CHECK_AS(UsageError,
               (o.include.empty() && o.exclude.empty()) || (o.num_nodes < 0 && o.num_gpus < 0),
               "--num_nodes/--num_gpus cannot be combined with --include/--exclude");
  ZRT_CHECK_AS(UsageError, !o.program.empty(),
               "no program given (usage: zrt-launch [options] -- PROGRAM ARGS...)");
  return cli;
}

std::vector<std::string> split_shell_words(const std::string& text, const std::string& flag) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // true also for an empty quoted word ('')
  char quote = 0;        // the open quote, or 0
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (quote == '\'') {
      if (c == '\'')
        quote = 0;
      else
        word += c;
    } else if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && next != '\0' &&
                 std::string("\"\\$`\n").find(next) != std::string::npos) {
        if (next != '\n') word += next;  // backslash-newline is a line continuation
        ++i;
      } else {
        word += c;
      }
    } else if (c == '\\') {
      ZRT_CHECK_AS(UsageError, i + 1 < text.size(), flag, " '", text,
                   "': a backslash at the end escapes nothing");
      if (next != '\n') {
        word += next;
        in_word = true;
      }
      ++i;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      if (c == '\'' || c == '"')
        quote = c;
      else
        word += c;
      in_word = true;
    }
  }
  ZRT_CHECK_AS(UsageError, quote == 0, flag, " '", text, "': unbalanced ",
               quote == '"' ? "double" : "single", " quote");
  if (in_word) words.push_back(word);
  return words;
}

std::string launch_help() {
  return make_options().help() +
         "\nExamples:\n"
         "  zrt-launch --np 2 -- ./zrt-train --deepspeed ds.json   2 ranks on this machine\n"
         "  zrt-launch -H hosts --num_gpus 4 -- ./train            4 ranks on each host\n"
         "  zrt-launch -H hosts -i 'w0:0,1@w1' -- ./train          slots 0,1 of w0 and all of w1\n"
         "  zrt-launch --np 2 --dry-run -- ./train                 show the mpirun command\n"
         "  zrt-launch --launcher_args '--mca btl tcp,self' -- ./train   more mpirun options\n"
         "\n"
         "Dashed spellings (--num-gpus, --num-nodes, --master-addr, --dry_run) and mpirun's -np\n"
         "are accepted too. Every rank gets the variables named ZRT_*, NCCL_*, CUDA_*, OMP_*,\n"
         "MKL_*, PYTHON*, UCX_* and those in .zrt_env / .deepspeed_env ($ZRT_ENV_FILE,\n"
         "$DS_ENV_FILE). Inside a Slurm allocation (SLURM_JOB_NODELIST set) without a hostfile,\n"
         "the hosts are the allocation's nodes with SLURM_TASKS_PER_NODE slots each. Exit status:\n"
         "the job's (128+N when mpirun dies of signal N), 1 for bad options, 2 for a bad "
         "hostfile,\n"
         "spec, env file or Slurm variable.\n";
}

}  // namespace zrt::launch
