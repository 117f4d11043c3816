// Damage operations for the bad-input corpus (tests/data/bad/cases.json): each is a JSON object
// {"op": ..., ...} applied to a copy of a good checkpoint, so the corpus holds recipes instead of
// binaries. Paths are relative to the save_dir. Operations:
//   remove {file}                       truncate {file, keep | keep_fraction}
//   flip {file, [record], offset | offset_fraction, mask}   write {file, text, repeat}
//   copy {from, to}                     mkfifo {file}        install {from (corpus-relative), to}
//   rezip {file, pickle_replace: [[from, to], ...], drop_record, truncate_record: {name, size}}
//   zip_size {file, entry, add, where: central | local | both}
//   edit {file, path: [key or index, ...], set: JSON | shape: [...] | narrow: n | remove: true}
//   fix_manifest {tag}                  manifest_set {tag, key, value}
//   manifest_file {tag, file, size_add | crc}
// flip's offset counts from the start of the zip entry `record` (e.g. "data/2") when given, or
// from the first central directory header for "@central".
// Strings given as bytes (write.text, pickle_replace) use one JSON code point (<= U+00FF) per byte.
#pragma once

#include <string>

#include "core/json.h"

namespace zrt::test {

// Applies one operation. `corpus_dir` is where "install" finds its files. Throws
// std::runtime_error for a malformed operation or one that does not apply (e.g. a pickle_replace
// pattern that is not found), so a stale recipe fails loudly instead of testing nothing.
void apply_damage(const std::string& save_dir, const Json& op, const std::string& corpus_dir);

// The bytes a JSON string stands for (one code point <= U+00FF per byte).
std::string latin1_bytes(const std::string& utf8);

}  // namespace zrt::test
