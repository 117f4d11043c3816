// zrt-train's run_clm data (hf/text_data.h): documents as datasets' loaders cut them, the
// percent split as datasets rounds it, blocks of 1000 documents at a time, the token cache shared
// by ranks and reused.
#include "hf/text_data.h"

#include <atomic>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "comm/local_comm.h"
#include "core/error.h"
#include "core/json.h"
#include "tests/support/python.h"
#include "tests/support/temp_dir.h"

namespace zrt::hf {
namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A tokenizer whose ids are the text's bytes after a "BOS" 300, counting its calls.
DocumentTokenizer byte_tokenizer(std::atomic<int>* calls) {
  DocumentTokenizer t;
  t.encode = [calls](const std::string& text) {
    ++*calls;
    std::vector<int64_t> ids = {300};
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  };
  t.identity = "bytes";
  return t;
}

TEST(TextData, TxtDocumentsArePythonsSplitlines) {
  ZRT_REQUIRE_PYTHON("json");
  test::TempDir dir("zrt_text_data");
  const std::string path = dir / "lines.txt";
  write_file(path, "one\r\ntwo\rthree\n\nfour\vfive\fsix\x1cseven\xc2\x85" "eight\xe2\x80\xa8"
                   "nine\xe2\x80\xa9ten caf\xc3\xa9\n\r\n last");
  for (bool keep : {true, false}) {
    // datasets' "text" loader: the file in text mode (universal newlines), str.splitlines.
    const auto r = test::run_python(
        "import json, sys\nprint(json.dumps(open(sys.argv[1], encoding='utf-8').read()"
        ".splitlines(keepends=sys.argv[2] == '1')))",
        path + (keep ? " 1" : " 0"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto want = Json::parse(r.output).get<std::vector<std::string>>();
    TextDataOptions o;
    o.keep_linebreaks = keep;
    std::vector<std::string> got;
    for (const Document& d : read_documents(path, o)) got.push_back(d.text);
    EXPECT_EQ(got, want) << "keep_linebreaks " << keep;
  }
}

TEST(TextData, JsonRecordsAndTheirErrors) {
  test::TempDir dir("zrt_text_data");
  TextDataOptions o;
  o.text_column_name = "body";
  write_file(dir / "a.jsonl", "{\"body\": \"x\\ny\", \"n\": 1}\n\n  \n{\"body\": \"\"}\n");
  const auto docs = read_documents(dir / "a.jsonl", o);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].text, "x\ny");
  EXPECT_EQ(docs[1].line, 4);
  write_file(dir / "b.json", "[{\"body\": \"p\"},\n {\"body\": \"q\"}]\n");
  EXPECT_EQ(read_documents(dir / "b.json", o).size(), 2u);
  const auto error_of = [&](const std::string& name, const std::string& bytes) {
    write_file(dir / name, bytes);
    try {
      read_documents(dir / name, o);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("c.jsonl", "{\"body\": \"p\"}\n{\"text\": \"q\"}\n")
                .find("c.jsonl:2: no \"body\" field (--text_column_name); the record has: text"),
            std::string::npos);
  EXPECT_NE(error_of("d.jsonl", "{\"body\": 3}\n").find("d.jsonl:1: \"body\" must be a string"),
            std::string::npos);
  EXPECT_NE(error_of("e.jsonl", "{\"body\": \"p\"}\n{\"body\"\n").find("e.jsonl:2: not a JSON record"),
            std::string::npos);
  EXPECT_NE(error_of("f.txt", "fine\nnot \xc3\x28 fine\n").find("f.txt:2: not valid UTF-8"),
            std::string::npos);
  EXPECT_NE(error_of("g.txt", "").find("g.txt: the file has no documents"), std::string::npos);
  EXPECT_NE(error_of("h.csv", "a,b\n").find("run_clm reads .txt, .json and .jsonl files"),
            std::string::npos);
}

TEST(TextData, PercentBoundaryIsDatasetsRounding) {
  ZRT_REQUIRE_PYTHON("json");
  // datasets' "train[:P%]": int(round(P * n / 100.0)).
  const auto r = test::run_python(
      "import json\nprint(json.dumps([[int(round(p * n / 100.0)) for n in range(0, 401)]"
      " for p in range(0, 101)]))");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json want = Json::parse(r.output);
  for (int64_t p = 0; p <= 100; ++p) {
    for (int64_t n = 0; n <= 400; ++n) {
      ASSERT_EQ(percent_boundary(p, n), want[p][n].get<int64_t>()) << p << "% of " << n;
    }
  }
}

// 2500 documents of lengths 1-30 (with the BOS 300) on two ranks: rank 0 tokenizes once, both
// map the cache; blocks are cut 1000 documents at a time, each run's remainder dropped; a second
// open reuses the cache.
TEST(TextData, BlocksOfThousandDocumentRunsFromOneSharedCache) {
  test::TempDir dir("zrt_text_data");
  const std::string path = dir / "docs.txt";
  std::string text;
  std::vector<int64_t> lengths;  // tokens per document
  for (int i = 0; i < 2500; ++i) {
    const int n = (i * 7) % 29;
    text += std::string(static_cast<size_t>(n), static_cast<char>('a' + i % 26)) + "\n";
    lengths.push_back(n + 2);  // BOS + bytes + "\n"
  }
  write_file(path, text);
  TextDataOptions o;
  o.train_file = path;
  o.block_size = 16;
  o.validation_split_percentage = 10;
  std::atomic<int> calls{0};
  const DocumentTokenizer tok = byte_tokenizer(&calls);
  std::vector<TextSplits> splits(2);
  comm::run_local_world(2, [&](comm::Comm& comm) { splits[comm.rank()] = load_text_data(o, tok, comm); });
  EXPECT_EQ(calls.load(), 2500);  // rank 0 alone tokenized
  // Expected: validation documents [0, 250), training [250, 2500) in runs of 1000.
  const auto expected_starts = [&](int64_t first, int64_t last) {
    std::vector<int64_t> starts;
    int64_t offset = 0;
    for (int64_t d = 0; d < first; ++d) offset += lengths[d];
    for (int64_t d = first; d < last; d += 1000) {
      int64_t run = 0;
      for (int64_t e = d; e < std::min(last, d + 1000); ++e) run += lengths[e];
      for (int64_t s = 0; s + 16 <= run; s += 16) starts.push_back(offset + s);
      offset += run;
    }
    return starts;
  };
  for (const TextSplits& s : splits) {
    const auto train = expected_starts(250, 2500), val = expected_starts(0, 250);
    ASSERT_EQ(s.train->size(), static_cast<int64_t>(train.size()));
    ASSERT_EQ(s.validation->size(), static_cast<int64_t>(val.size()));
    for (size_t i = 0; i < train.size(); ++i) ASSERT_EQ(s.train->start(i), train[i]) << i;
    for (size_t i = 0; i < val.size(); ++i) ASSERT_EQ(s.validation->start(i), val[i]) << i;
  }
  const auto [x, y] = splits[1].train->get(0);  // document 250 starts the split: BOS first
  EXPECT_EQ(x.size(0), 16);
  EXPECT_EQ(x[0].item<int64_t>(), 300);
  EXPECT_TRUE(x.equal(y));
  EXPECT_EQ(splits[0].train->digest(), splits[1].train->digest());
  comm::run_local_world(1, [&](comm::Comm& comm) { load_text_data(o, tok, comm); });
  EXPECT_EQ(calls.load(), 2500);  // the cache was reused
}

// Note [run_clm's data] 5: the same blocks, each token with its position in its document (from
// the block's start for a document begun before it), a document's first token labelled -100;
// empty documents (no tokens) start nothing.
TEST(TextData, PackedDocumentsCarryPositionsAndUnlabelledStarts) {
  test::TempDir dir("zrt_text_data");
  const std::string path = dir / "docs.jsonl";
  write_file(path, "{\"text\": \"abcdefgh\"}\n{\"text\": \"\"}\n{\"text\": \"xy\"}\n"
                   "{\"text\": \"pqrstuvw\"}\n");
  DocumentTokenizer tok;  // the bytes, no special tokens: the empty document has no tokens
  tok.encode = [](const std::string& text) { return std::vector<int64_t>(text.begin(), text.end()); };
  tok.identity = "plain bytes";
  TextDataOptions o;
  o.train_file = path;
  o.block_size = 6;
  o.validation_split_percentage = 0;
  o.packed_documents = true;
  TextSplits s;
  comm::run_local_world(1, [&](comm::Comm& comm) { s = load_text_data(o, tok, comm); });
  ASSERT_EQ(s.train->size(), 3);  // 18 tokens: abcdef | ghxypq | rstuvw
  const std::vector<std::vector<int64_t>> positions = {
      {0, 1, 2, 3, 4, 5}, {0, 1, 0, 1, 0, 1}, {0, 1, 2, 3, 4, 5}};
  for (int64_t i = 0; i < 3; ++i) {
    const auto [x, y] = s.train->get(i);
    ASSERT_EQ(x.sizes(), (std::vector<int64_t>{2, 6}));
    EXPECT_EQ(std::vector<int64_t>(x[1].data_ptr<int64_t>(), x[1].data_ptr<int64_t>() + 6),
              positions[i]) << "block " << i;
    EXPECT_TRUE(y.eq(-100).equal(x[1].eq(0))) << "block " << i;
    EXPECT_TRUE(y.masked_select(y.ne(-100)).equal(x[0].masked_select(y.ne(-100))));
  }
  const auto [x1, y1] = s.train->get(1);
  EXPECT_EQ(static_cast<char>(x1[0][2].item<int64_t>()), 'x');  // "xy" starts at 2 in block 1
}

}  // namespace
}  // namespace zrt::hf
