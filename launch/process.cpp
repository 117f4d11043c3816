// Process handling for zrt-launch (see process.h). POSIX only.
//
// Note [Forwarding signals]
// mpirun stays in the launcher's process group, so it keeps the terminal (it forwards stdin to
// rank 0) and a Ctrl-C at the terminal reaches it directly. The launcher therefore forwards only
// signals sent to it alone (si_code != SI_KERNEL: `kill PID`, a batch system, a test); forwarding
// a terminal's SIGINT as well would hand mpirun a second SIGINT, which it treats as "abort now
// without cleanup".
#include "launch/process.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "launch/banner_filter.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace zrt::launch {
namespace {

std::atomic<pid_t> g_child{0};
std::atomic<int> g_stop_signal{0};  // the first SIGINT, SIGTERM or SIGHUP that arrived
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

void forward_signal(int sig, siginfo_t* info, void*) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
  const pid_t child = g_child.load();
  if (child > 0 && (info == nullptr || info->si_code != SI_KERNEL)) kill(child, sig);
}

// Installs forward_signal for kForwardedSignals with the signals blocked; start(pid) unblocks
// them once the handler knows the child; the destructor restores the previous handlers.
class SignalForwarding {
 public:
  SignalForwarding() {
    struct sigaction action {};
    action.sa_sigaction = forward_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigset_t blocked;
    sigemptyset(&blocked);
    for (int sig : kForwardedSignals) sigaddset(&blocked, sig);
    sigprocmask(SIG_BLOCK, &blocked, &old_mask_);
    for (int i = 0; i < kCount; ++i) sigaction(kForwardedSignals[i], &action, &previous_[i]);
  }
  ~SignalForwarding() {
    g_child.store(0);
    restore_in_child();
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

  void start(pid_t child) {
    if (child > 0) g_child.store(child);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  void restore_in_child() {
    for (int i = 0; i < kCount; ++i) sigaction(kForwardedSignals[i], &previous_[i], nullptr);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }

 private:
  static constexpr int kCount = 3;
  struct sigaction previous_[kCount];
  sigset_t old_mask_;
};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// "NAME=VALUE" strings: the current environment with `env` applied on top.
std::vector<std::string> child_environment(const EnvVars& env) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::size_t eq = entry.find('=');
    if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : env) merged[name] = value;
  std::vector<std::string> out;
  for (const auto& [name, value] : merged) out.push_back(name + "=" + value);
  return out;
}

// Note [Waiting for the ranks]
// On Ctrl-C mpirun can exit before its ranks have (they are still unwinding, or killed a moment
// later). The launcher is a child subreaper (PR_SET_CHILD_SUBREAPER), so processes orphaned by
// mpirun become its children, and after mpirun ends it reaps them, up to kReapDeadlineS, before
// it returns: when zrt-launch exits, the job is over.
constexpr double kReapDeadlineS = 30.0;

// Returns false when processes still run after kReapDeadlineS.
bool reap_orphans() {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    int status = 0;
    const pid_t p = waitpid(-1, &status, WNOHANG);
    if (p < 0 && errno == EINTR) continue;
    if (p < 0) return true;  // ECHILD: nothing left
    if (p == 0) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > kReapDeadlineS) {
        std::fprintf(stderr, "zrt-launch: processes of the job still run after %.0f s\n", waited);
        return false;
      }
      usleep(20000);
    }
  }
}

// Copies the job's standard error (read end `fd`) to ours through a BannerFilter, line by line,
// until every writer has closed it.
void copy_filtered_stderr(int fd) {
  BannerFilter filter;
  std::string pending;
  auto emit = [](const std::vector<std::string>& lines) {
    for (const std::string& l : lines) {
      const std::string out = l + "\n";
      (void)!write(STDERR_FILENO, out.data(), out.size());
    }
  };
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      emit(filter.feed(pending.substr(start, nl - start)));
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) emit(filter.feed(pending));
  emit(filter.finish());
  close(fd);
}

}  // namespace

std::optional<std::string> find_executable(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) {
    return is_executable_file(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find(':', start), path.size());
    const std::string dir = end > start ? path.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

int exit_code_from_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return static_cast<int>(ExitCode::kInternal);
}

int run_and_wait(const std::vector<std::string>& argv, const EnvVars& env) {
  ZRT_INTERNAL_ASSERT(!argv.empty(), "empty argv");
  const std::vector<std::string> env_strings = child_environment(env);
  std::vector<char*> child_argv, child_envp;
  for (const std::string& a : argv) child_argv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env_strings) child_envp.push_back(const_cast<char*>(e.c_str()));
  child_argv.push_back(nullptr);
  child_envp.push_back(nullptr);

  int exec_error[2];  // the child writes errno here when execve fails; a good exec closes it
  ZRT_CHECK(pipe2(exec_error, O_CLOEXEC) == 0, "pipe failed: ", std::strerror(errno));
  int job_stderr[2];  // the job's standard error, shown through a BannerFilter
  ZRT_CHECK(pipe2(job_stderr, O_CLOEXEC) == 0, "pipe failed: ", std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = -1;
  int fork_errno = 0;
  {
    SignalForwarding forwarding;  // blocks the signals until the child's pid is known
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // Note [Waiting for the ranks]
    g_stop_signal.store(0);
    const pid_t launcher = getpid();
    pid = fork();
    if (pid == 0) {
      forwarding.restore_in_child();
      // Note [The job dies with its launcher]: a launcher killed by SIGKILL forwards nothing, so
      // mpirun is asked to get SIGTERM when it goes (and ends the ranks, as for a forwarded
      // SIGTERM). The request survives execve; a launcher already gone is checked for after it.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher) _exit(128 + SIGTERM);
      dup2(job_stderr[1], STDERR_FILENO);  // dup2 clears O_CLOEXEC on the copy
      execve(child_argv[0], child_argv.data(), child_envp.data());
      const int err = errno;
      (void)!write(exec_error[1], &err, sizeof(err));
      _exit(127);
    }
    fork_errno = errno;
    forwarding.start(pid);
    close(exec_error[1]);
    close(job_stderr[1]);
    std::thread stderr_copier(copy_filtered_stderr, job_stderr[0]);
    int exec_errno = 0;
    ssize_t n = 0;
    if (pid > 0) {
      while ((n = read(exec_error[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
      }
    }
    close(exec_error[0]);
    int status = 0;
    if (pid > 0) {
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (reap_orphans()) {
      stderr_copier.join();  // every writer has exited: the pipe is at its end
    } else {
      stderr_copier.detach();  // a leftover process may hold the pipe open
    }
    ZRT_CHECK(pid > 0, "cannot start '", argv[0], "': fork failed: ", std::strerror(fork_errno));
    ZRT_CHECK(n != static_cast<ssize_t>(sizeof(exec_errno)), "cannot start '", argv[0],
              "': ", std::strerror(exec_errno));
    // Stopped by a signal: the shell's code for it, whatever mpirun made of it (it exits 1).
    if (const int sig = g_stop_signal.load(); sig != 0) {
      std::fprintf(stderr,
                   "zrt-launch: stopped by %s: sent on to mpirun, which ended the ranks\n",
                   sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
      return 128 + sig;
    }
    return exit_code_from_status(status);
  }
}

}  // namespace zrt::launch
