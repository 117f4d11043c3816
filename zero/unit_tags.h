// Unit tags: what lets every ZeRO-3 collective prove that all ranks are moving the same unit
// (Note [Unit tags] in zero/unit_tags.cpp). UnitGatherer and UnitGradReducer put a tag into
// the buffers they send and check what arrives; a mismatch is an Error on every rank, at the
// collective where the ranks parted, naming the units.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "zero/stage3_layout.h"

namespace zrt::zero {

// Whether collectives carry unit tags: yes unless ZRT_UNIT_TAGS=0 in the environment (read once;
// every rank must agree; for measuring what the tags cost, docs/PERFORMANCE.md).
bool unit_tags_enabled();

// How a unit is named in messages: "unit 3 (layers.1.experts.0)", the dotted prefix its
// parameters share; -1 is the persistent parameters, num_units() the parameters in no unit.
std::string unit_label(const Stage3Layout& layout, int unit);

// What each unit's collectives are for, for communicator messages (comm::CollectiveContext, the
// stall check of Note [Stalled collectives]): "ZeRO-3 <what> of unit 3 (layers.1)".
class UnitContexts {
 public:
  UnitContexts(const Stage3Layout& layout, const std::string& what);
  // Unit `unit`'s; -1 and num_units() name the persistent parameters and those in no unit.
  const std::string& operator[](int unit) const;

 private:
  std::vector<std::string> labels_;  // units, then -1, then num_units()
};

// Each tag takes a 64-byte slot, so that the chunks after it keep their alignment.
constexpr int64_t kTagSlotBytes = 64;

// ---- all-gathers: an 8-byte tag in a slot after each rank's chunk, copied bit for bit ----
// Elements of `dtype` in the slot (0 with ZRT_UNIT_TAGS=0).
int64_t gather_tag_elements(at::ScalarType dtype);
// Writes unit's tag into `slot` (gather_tag_elements elements, any device; the rest zeros).
void write_gather_tag(const at::Tensor& slot, int unit);
// Checks the tag of every rank's chunk in `gathered` (rank r's at r * stride + offset): all
// must be `unit`'s. `rank`: this rank in the gather's group; `group`: how the message names the
// group ("" for the world).
void check_gather_tags(const Stage3Layout& layout, const at::Tensor& gathered, int64_t stride,
                       int64_t offset, int ranks, int rank, int unit, const std::string& group);

// ---- reduce-scatters: the unit's tag as bits, summed over the ranks ----
// Bits per chunk for `units` units reduced in `dtype` by `ranks` ranks: 0 when the sum of
// `ranks` ones is not exact in that dtype (then reductions go unchecked).
int reduce_tag_bits(int units, int ranks, at::ScalarType dtype);
// Elements each chunk grows by: `bits` rounded up to whole 64-byte slots (the rest zeros).
int64_t reduce_tag_elements(int bits, at::ScalarType dtype);
// Writes unit's bits at [offset, offset + bits) of each of the `ranks` chunks of `send`.
void write_reduce_tag(const at::Tensor& send, int64_t stride, int64_t offset, int bits, int ranks,
                      int unit);
// Checks the summed bits at [offset, offset + bits) of `reduced`: every rank sent `unit`'s.
void check_reduce_tag(const Stage3Layout& layout, const at::Tensor& reduced, int64_t offset,
                      int bits, int ranks, int rank, int unit);

}  // namespace zrt::zero
