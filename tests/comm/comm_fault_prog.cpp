// A small MPI program that misbehaves on purpose, driven by comm_fault_test:
//   comm_fault_prog throw|exit|skip|stall|slow|extra
// Rank 1 misbehaves during the second collective; every rank runs under zrt::run_tool, so the
// exit code tells how it ended (4 = communication error). `slow` is not a fault: rank 1 arrives
// at the second collective 5 s late.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/init.h"
#include "core/error.h"
#include "core/tool_main.h"

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  return zrt::run_tool("comm_fault_prog", [&] {
    auto comm = zrt::comm::init_from_env();
    at::Tensor t = at::ones({16});
    comm->all_reduce(t);  // #1: everyone
    if (comm->rank() == 1) {
      if (scenario == "throw") throw zrt::ConfigError("rank 1 gives up (injected)");
      if (scenario == "exit") std::_Exit(3);
      if (scenario == "stall") std::this_thread::sleep_for(std::chrono::seconds(120));
      if (scenario == "slow") std::this_thread::sleep_for(std::chrono::seconds(5));
      if (scenario == "extra") {  // #2 on rank 1 is an all_gather of its own
        const std::string context = "an extra step of rank 1";
        const zrt::comm::CollectiveContext in(context);
        at::Tensor all = at::empty({8 * comm->size()});
        comm->all_gather(all, at::ones({8}));
      }
      if (scenario == "skip") {
        comm->barrier();  // #2 on rank 1 is a barrier: the all_reduce below is skipped
        return 0;
      }
    }
    comm->all_reduce(t);  // #2
    std::printf("rank %d finished normally\n", comm->rank());
    return 0;
  });
}
