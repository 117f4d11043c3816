// Launch planning (see plan.h).
//
// Note [Binding and threads]
// Open MPI binds each rank to one core (np <= 2) or one socket (np > 2) by default. ZeroRT ranks
// run multi-threaded CPU kernels (OMP_NUM_THREADS, set below to cores / ranks-per-node), and a
// rank pinned to one core would run those threads on that core alone. So zrt-launch always passes
// `--bind-to none` and leaves placement to the OS.
//
// Note [Slot indices]
// A slot index is a GPU ordinal, as in DeepSpeed. When every host uses slots 0..k-1 the ranks pick
// their device from the local rank and CUDA_VISIBLE_DEVICES is left alone. When --include or
// --exclude leaves other slots (host1:1,3), each host becomes its own mpirun app context whose
// program runs under `env CUDA_VISIBLE_DEVICES=1,3`, so local rank i gets the i-th chosen GPU.
//
// Note [MCA variables]
// mpirun reads OMPI_MCA_NAME=VALUE from its environment as `--mca NAME VALUE`, and exports every
// OMPI_* variable to the ranks on all nodes by itself (mpirun(1), "Exported Environment
// Variables"). zrt-launch leaves them alone, but they change what runs (transports, interfaces),
// so the notes and the --dry-run text show them.
#include "launch/plan.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <utility>

#include "core/error.h"
#include "launch/slurm.h"

namespace zrt::launch {
namespace {

const std::string* find_var(const EnvVars& vars, const std::string& name) {
  for (const auto& [n, v] : vars) {
    if (n == name) return &v;
  }
  return nullptr;
}

World local_pool(const LaunchOptions& options, const HostFacts& facts) {
  ZRT_CHECK_AS(UsageError, options.num_nodes <= 1, "--num_nodes ", options.num_nodes,
               " needs a hostfile listing the nodes (--hostfile FILE) or a Slurm allocation");
  int slots = options.np > 0 ? options.np : options.num_gpus;
  if (slots <= 0) slots = facts.visible_gpus;
  ZRT_CHECK_AS(UsageError, slots > 0,
               "no GPUs visible and no rank count given: say how many ranks to start with --np N");
  return make_local_world("localhost", slots);
}

std::string join_host_counts(const World& world) {
  std::string text;
  for (const HostSlots& h : world.hosts) {
    text += (text.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots.size());
  }
  return text;
}

std::string join_ints(const std::vector<int>& values) {
  std::string text;
  for (int v : values) text += (text.empty() ? "" : ",") + std::to_string(v);
  return text;
}

// One `-np K [--host H:K] [env CUDA_VISIBLE_DEVICES=...] PROGRAM ARGS` app context per entry.
void append_app_contexts(const World& world, const LaunchPlan& plan,
                         const std::vector<std::string>& program, std::vector<std::string>* argv) {
  auto append_program = [&](const std::vector<std::string>& prefix) {
    argv->insert(argv->end(), prefix.begin(), prefix.end());
    argv->insert(argv->end(), program.begin(), program.end());
  };
  if (world.slots_are_prefixes()) {
    argv->insert(argv->end(), {"-np", std::to_string(world.num_ranks())});
    if (!plan.single_node) argv->insert(argv->end(), {"--host", join_host_counts(world)});
    append_program({});
    return;
  }
  for (std::size_t i = 0; i < world.hosts.size(); ++i) {  // Note [Slot indices]
    const HostSlots& h = world.hosts[i];
    const std::string count = std::to_string(h.slots.size());
    if (i > 0) argv->push_back(":");
    argv->insert(argv->end(), {"-np", count});
    if (!plan.single_node) argv->insert(argv->end(), {"--host", h.host + ":" + count});
    append_program({"env", "CUDA_VISIBLE_DEVICES=" + join_ints(h.slots)});
  }
}

// What every rank gets on top of the launcher's environment (root-allow variables, env files,
// MASTER_ADDR, ZRT_PROGRESS, OMP_NUM_THREADS) in the order it is printed, and the OMPI_MCA_*
// variables mpirun will read from the launcher's own environment.
void add_environment(const LaunchOptions& options, const HostFacts& facts,
                     const EnvFiles& env_files, int per_node, LaunchPlan* out) {
  LaunchPlan& plan = *out;
  if (facts.is_root) {
    set_var(&plan.env, "OMPI_ALLOW_RUN_AS_ROOT", "1");
    set_var(&plan.env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    plan.notes.push_back(
        "running as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  }
  for (const std::string& path : env_files.paths) plan.notes.push_back("read env file " + path);
  for (const auto& [name, value] : env_files.vars) {
    const auto it = facts.env.find(name);
    if (it != facts.env.end() && it->second != value) {
      plan.notes.push_back(name + "='" + value + "' from the env file replaces '" + it->second +
                           "'");
    }
    set_var(&plan.env, name, value);
  }
  if (!options.master_addr.empty()) set_var(&plan.env, "MASTER_ADDR", options.master_addr);
  if (!facts.stdout_is_terminal && facts.env.count("ZRT_PROGRESS") == 0 &&
      find_var(plan.env, "ZRT_PROGRESS") == nullptr) {
    set_var(&plan.env, "ZRT_PROGRESS", "lines");  // Note in HostFacts::stdout_is_terminal
  }
  if (facts.env.count("OMP_NUM_THREADS") == 0 && find_var(plan.env, "OMP_NUM_THREADS") == nullptr) {
    const int threads = std::max(1, facts.cores / per_node);
    set_var(&plan.env, "OMP_NUM_THREADS", std::to_string(threads));
    plan.notes.push_back(str("OMP_NUM_THREADS not set: using ", threads, " per rank (", facts.cores,
                             " cores / ", per_node, " ranks per node",
                             plan.single_node ? "" : ", assuming every node has as many cores",
                             ")"));
  }
  for (const auto& [name, value] : facts.env) {  // Note [MCA variables]
    if (name.rfind(kMcaPrefix, 0) == 0 && find_var(plan.env, name) == nullptr) {
      plan.mpi_env.emplace_back(name, value);
      plan.notes.push_back("mpirun reads " + name + "=" + value + " from the environment");
    }
  }
}

}  // namespace

World select_world(const LaunchOptions& options, const HostFacts& facts,
                   std::vector<std::string>* notes) {
  ZRT_CHECK_AS(UsageError, options.np <= 0 || options.num_gpus <= 0,
               "--np and --num_gpus are exclusive (got --np ", options.np, " and --num_gpus ",
               options.num_gpus, ")");
  ZRT_CHECK_AS(UsageError, options.include.empty() || options.exclude.empty(),
               "--include and --exclude are exclusive (got --include '", options.include,
               "' and --exclude '", options.exclude, "')");
  ZRT_CHECK_AS(UsageError,
               (options.include.empty() && options.exclude.empty()) ||
                   (options.num_nodes <= 0 && options.num_gpus <= 0),
               "--num_nodes/--num_gpus cannot be combined with --include/--exclude (as in "
               "DeepSpeed): name the slots in the spec instead");
  std::string hostfile = options.hostfile;
  std::error_code ec;
  if (hostfile.empty() && !options.default_hostfile.empty() &&
      std::filesystem::exists(options.default_hostfile, ec)) {
    hostfile = options.default_hostfile;
    notes->push_back("using the default hostfile " + hostfile);
  }
  // The pool to narrow: the hostfile, else the Slurm allocation, else this machine alone.
  World world;
  bool from_hosts = true;
  if (!hostfile.empty()) {
    world = world_from_hostfile(read_hostfile(hostfile));
  } else if (auto slurm = slurm_allocation(facts.env)) {
    world = std::move(slurm->world);
    notes->insert(notes->end(), slurm->notes.begin(), slurm->notes.end());
  } else {
    world = local_pool(options, facts);
    from_hosts = false;
  }
  if (!options.include.empty()) world = include_slots(world, options.include);
  if (!options.exclude.empty()) world = exclude_slots(world, options.exclude);
  if (options.num_nodes > 0) world = first_hosts(world, options.num_nodes);
  if (options.num_gpus > 0) world = first_slots_per_host(world, options.num_gpus);
  if (options.np > 0 && from_hosts) world = first_ranks(world, options.np);
  return world;
}

LaunchPlan build_plan(const World& world, const LaunchOptions& options, const HostFacts& facts,
                      const EnvFiles& env_files, const std::string& mpirun) {
  ZRT_CHECK_AS(UsageError, !options.program.empty(),
               "no program to run (usage: zrt-launch [options] -- PROGRAM ARGS...)");
  ZRT_INTERNAL_ASSERT(world.num_ranks() > 0, "empty world");
  LaunchPlan plan;
  plan.world = world;
  plan.single_node = world.hosts.size() == 1 && is_local_host(world.hosts[0].host, facts.hostname);
  const int ranks = world.num_ranks();
  add_environment(options, facts, env_files, world.max_ranks_per_host(), &plan);

  plan.argv = {mpirun};
  plan.argv.insert(plan.argv.end(), {"--bind-to", "none"});  // Note [Binding and threads]
  if (options.oversubscribe) {
    plan.argv.push_back("--oversubscribe");
  } else if (plan.single_node && ranks > facts.cores) {
    plan.argv.push_back("--oversubscribe");
    plan.notes.push_back(str(ranks, " ranks on ", facts.cores, " cores: adding --oversubscribe"));
  }
  if (options.timeout_s > 0)
    plan.argv.insert(plan.argv.end(), {"--timeout", std::to_string(options.timeout_s)});
  if (!options.launcher_args.empty()) {
    plan.argv.insert(plan.argv.end(), options.launcher_args.begin(), options.launcher_args.end());
    plan.notes.push_back("mpirun options from --launcher_args: " +
                         shell_join(options.launcher_args));
  }
  std::set<std::string> forwarded;
  for (const auto& [name, value] : facts.env) {
    if (is_forwarded_name(name)) forwarded.insert(name);
  }
  for (const auto& [name, value] : plan.env) forwarded.insert(name);
  for (const std::string& name : forwarded) plan.argv.insert(plan.argv.end(), {"-x", name});
  append_app_contexts(world, plan, options.program, &plan.argv);
  return plan;
}

LaunchPlan make_plan(const LaunchOptions& options, const HostFacts& facts,
                     const std::string& mpirun) {
  ZRT_CHECK_AS(UsageError, !options.program.empty(),
               "no program to run (usage: zrt-launch [options] -- PROGRAM ARGS...)");
  std::vector<std::string> notes;
  const World world = select_world(options, facts, &notes);
  const EnvFiles env_files = load_env_files(facts.env, facts.cwd);
  LaunchPlan plan = build_plan(world, options, facts, env_files, mpirun);
  plan.notes.insert(plan.notes.begin(), notes.begin(), notes.end());
  return plan;
}

std::string shell_quote(const std::string& word) {
  const bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
    return std::isalnum(c) ||
           std::string("_@%+=:,./-").find(static_cast<char>(c)) != std::string::npos;
  });
  if (safe) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) text += (text.empty() ? "" : " ") + shell_quote(w);
  return text;
}

std::string format_dry_run(const LaunchPlan& plan) {
  const std::size_t nodes = plan.world.hosts.size();
  std::string text = str("# ", plan.world.num_ranks(), " rank(s) on ", nodes,
                         nodes == 1 ? " node" : " nodes", ": ", plan.world.describe(), "\n");
  for (const auto& [name, value] : plan.mpi_env)
    text += "# from the environment: export " + name + "=" + shell_quote(value) + "\n";
  for (const auto& [name, value] : plan.env)
    text += "export " + name + "=" + shell_quote(value) + "\n";
  return text + shell_join(plan.argv) + "\n";
}

}  // namespace zrt::launch
