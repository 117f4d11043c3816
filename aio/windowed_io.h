// Unaligned access to swap files through one aligned window buffer, and the per-job folders swap
// files live in. Synchronous: for whole-tensor reads and writes (checkpoints, loads, small
// parameters), not for the streamed paths, which issue aligned requests of their own.
#pragma once

#include <cstdint>
#include <string>

namespace zrt::aio {

class IoEngine;
class SwapFile;
class AlignedBuffer;

// Bytes [offset, offset + bytes) of `file` into dst, through `window` (its size, a multiple of
// kIoAlignment, bounds each request). Throws zrt::Error naming the file (IoEngine's errors).
void read_range(IoEngine& engine, const SwapFile& file, int64_t offset, void* dst, int64_t bytes,
                AlignedBuffer& window);
// The same bytes from src; a partly covered page at either end is read first and merged, so the
// bytes around the range keep their values.
void write_range(IoEngine& engine, const SwapFile& file, int64_t offset, const void* src,
                 int64_t bytes, AlignedBuffer& window);

// Note [Swap folders]:
// Every swapping component makes a fresh folder `<parent>/zerort-<kind>-rank<R>-XXXXXX` (mkdtemp:
// never an earlier job's folder, whatever its pid or rank) and removes it, with its files, at a
// clean exit; a crashed job leaves its folder behind for the user to delete. `key` names the
// config key that gave `parent` in errors (e.g. "offload_optimizer.nvme_path"): an empty, missing
// or unwritable parent throws zrt::Error naming it.
std::string make_swap_folder(const std::string& parent, const std::string& kind, int rank,
                             const std::string& key);
// Removes a folder made by make_swap_folder once its files are gone; warns (never throws) when it
// cannot.
void remove_swap_folder(const std::string& folder) noexcept;

}  // namespace zrt::aio
