// The bad-input corpus (tests/data/bad/cases.json): every config case through `zrt-config
// resolve`, every checkpoint case (a good engine checkpoint damaged by a recipe, see
// checkpoint_damage.h) through `zrt-ckpt verify | inspect | to-fp32`. Each case must give its
// documented exit code and a message containing the documented text; a crash (a signal, exit >= 128
// or the internal-error code 70) always fails, and a failing tool must not write anything.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "core/json.h"
#include "tests/tools/checkpoint_damage.h"
#include "tests/tools/checkpoint_factory.h"

namespace zrt::test {
namespace {

namespace fs = std::filesystem;

const std::string kCorpusDir = std::string(ZRT_SOURCE_DIR) + "/tests/data/bad";

// Every path under `dir` with its size (-1 for anything but a regular file).
std::map<std::string, int64_t> listing(const std::string& dir) {
  std::map<std::string, int64_t> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto st = fs::symlink_status(e.path());
    out[e.path().string()] =
        fs::is_regular_file(st) ? static_cast<int64_t>(fs::file_size(e.path())) : -1;
  }
  return out;
}

std::string args_of(const Json& c, const char* key) {
  std::string s;
  for (const Json& a : c.value(key, Json::array())) s += " " + shell_quote(a.get<std::string>());
  return s;
}

class Bases {
 public:
  Bases(const Json& specs, std::string root) : specs_(specs), root_(std::move(root)) {}
  // The save_dir of base `name`, made on first use.
  const std::string& get(const std::string& name) {
    auto it = made_.find(name);
    if (it != made_.end()) return it->second;
    const Json& s = specs_.at(name);
    CheckpointSpec spec;
    spec.stage = s.at("stage").get<int>();
    spec.world = s.at("world").get<int>();
    spec.bf16 = s.value("bf16", false);
    spec.steps = s.value("steps", 2);
    const std::string dir = root_ + "/" + name;
    fs::remove_all(dir);
    make_engine_checkpoint(dir, spec);
    return made_[name] = dir;
  }

 private:
  Json specs_;
  std::string root_;
  std::map<std::string, std::string> made_;
};

TEST(BadInputCorpus, EveryCaseGivesItsDocumentedOutcome) {
  std::ifstream in(kCorpusDir + "/cases.json");
  ASSERT_TRUE(in) << "cannot read " << kCorpusDir << "/cases.json";
  const Json doc = Json::parse(in);
  // ZRT_BAD_CORPUS_OUT=DIR keeps the damaged checkpoints in DIR (to look at them, or as seeds).
  TempDir scratch_dir;
  const char* keep = std::getenv("ZRT_BAD_CORPUS_OUT");
  const std::string scratch = keep != nullptr ? std::string(keep) : scratch_dir.path();
  if (keep != nullptr) fs::create_directories(scratch);
  Bases bases(doc.at("bases"), scratch + "/bases");
  std::set<std::string> names;
  std::map<std::string, int> failing_cases;  // by kind, expected exit != 0
  for (const Json& c : doc.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE("case " + name);
    ASSERT_TRUE(names.insert(name).second) << "duplicate case name";
    const std::string kind = c.at("kind").get<std::string>();
    const int expected_exit = c.at("exit").get<int>();
    const std::string message = c.at("message").get<std::string>();
    ASSERT_TRUE(expected_exit == 0 || !message.empty()) << "a failing case needs a message";
    std::string cmd;
    std::string case_dir;
    if (kind == "config") {
      const std::string source = c.contains("file")
                                     ? kCorpusDir + "/" + c["file"].get<std::string>()
                                     : c.at("deepspeed").get<std::string>();
      cmd = std::string(ZRT_CONFIG_TOOL) + " resolve --deepspeed " + shell_quote(source) +
            args_of(c, "args");
    } else {
      ASSERT_EQ(kind, "checkpoint");
      case_dir = scratch + "/case_" + name;
      fs::remove_all(case_dir);
      const std::string save = case_dir + "/save";
      fs::create_directories(case_dir);
      fs::copy(bases.get(c.at("base").get<std::string>()), save, fs::copy_options::recursive);
      for (const Json& op : c.value("damage", Json::array())) {
        ASSERT_NO_THROW(apply_damage(save, op, kCorpusDir)) << op.dump();
      }
      const std::string target =
          c.contains("dir") ? save + "/" + c["dir"].get<std::string>() : save;
      const std::string tool = c.at("tool").get<std::string>();
      cmd = std::string(ZRT_CKPT_TOOL) + " " + tool + " " + shell_quote(target);
      if (tool == "to-fp32") cmd += " " + shell_quote(case_dir + "/" + c.value("out", "out.bin"));
      cmd += args_of(c, "args");
    }
    const auto before = case_dir.empty() ? std::map<std::string, int64_t>{} : listing(case_dir);
    // A tool that blocks (e.g. on a FIFO) is a failure too, not a hung test.
    const ToolResult r = run_command("timeout -s KILL 120 " + cmd);
    EXPECT_EQ(r.signal, 0) << "crashed or hung: " << cmd << "\n" << r.output;
    EXPECT_NE(r.exit_code, 70) << "internal error: " << cmd << "\n" << r.output;
    EXPECT_EQ(r.exit_code, expected_exit) << cmd << "\n" << r.output;
    // "message" is literal text; "message_regex" (ECMAScript) where the text holds numbers that
    // depend on the LibTorch version (file sizes).
    const bool found = c.value("message_regex", false)
                           ? std::regex_search(r.output, std::regex(message))
                           : r.output.find(message) != std::string::npos;
    EXPECT_TRUE(found) << "expected the message to contain: " << message << "\n"
        << cmd << "\n"
        << r.output;
    if (!case_dir.empty() && expected_exit != 0) {
      EXPECT_EQ(listing(case_dir), before) << "a failing tool wrote or changed files: " << cmd;
    }
    if (expected_exit != 0) ++failing_cases[kind];
  }
  // The corpus promises at least 30 bad configs and 20 bad checkpoints (tests/data/bad/README.md).
  EXPECT_GE(failing_cases["config"], 30);
  EXPECT_GE(failing_cases["checkpoint"], 20);
  std::printf("bad-input corpus: %zu cases (%d bad configs, %d bad checkpoints) as documented\n",
              names.size(), failing_cases["config"], failing_cases["checkpoint"]);
}

}  // namespace
}  // namespace zrt::test
