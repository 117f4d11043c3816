// The world of a Slurm allocation, read from the variables salloc/sbatch set: the node names from
// SLURM_JOB_NODELIST (or the older SLURM_NODELIST) in Slurm's compressed host-list syntax, and the
// slots of each node from SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE, a plain-number
// SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE, or 1. Pure functions of an environment snapshot;
// malformed values are ConfigErrors naming the variable and its text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch/host_facts.h"
#include "launch/world.h"

namespace zrt::launch {

// Looked for in this order; the first one set (non-empty) names the allocation's nodes.
inline constexpr const char* kSlurmNodelistVars[] = {"SLURM_JOB_NODELIST", "SLURM_NODELIST"};

// Expands a Slurm host list: `node[01-04,07],gpu-a[1-2],login` is node01..node04, node07, gpu-a1,
// gpu-a2, login. Commas outside brackets separate items; a bracket holds comma-separated numbers
// and `lo-hi` ranges, zero-padded to the width of `lo` (`[08-10]` is 08, 09, 10); several bracket
// groups in one item expand left to right (`r[1-2]n[1-2]` is r1n1, r1n2, r2n1, r2n2). Empty items,
// unbalanced or nested brackets, bad numbers, descending ranges, repeated names and lists of more
// than kMaxSlurmNodes nodes are errors; `variable` names the text in them.
std::vector<std::string> expand_slurm_nodelist(const std::string& text,
                                               const std::string& variable);

// Expands SLURM_TASKS_PER_NODE syntax: comma-separated counts, each optionally repeated with
// `(xM)`: `2(x3),1` is 2, 2, 2, 1. Counts and repeats are positive integers.
std::vector<int> expand_slurm_tasks_per_node(const std::string& text, const std::string& variable);

inline constexpr int kMaxSlurmNodes = 100000;

struct SlurmAllocation {
  World world;                     // every node with slots 0..k-1, in nodelist order
  std::vector<std::string> notes;  // where the nodes and slot counts came from, one line each
};

// The allocation described by `env`, or nullopt when no nodelist variable is set.
std::optional<SlurmAllocation> slurm_allocation(const EnvMap& env);

}  // namespace zrt::launch
