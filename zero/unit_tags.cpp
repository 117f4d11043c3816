#include "zero/unit_tags.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace zrt::zero {

// Note [Unit tags]
// Every rank must run ZeRO-3's unit collectives in the same order. A model that runs different
// modules on different ranks (routed experts, early exits) breaks that, and when two ranks'
// collectives of different units have the same op and size, the communicator pairs them: each
// rank would compute with a mix of the two units' weights and reduce one unit's gradients into
// the other's partitions, silently. So each unit collective carries the unit's id, at no extra
// round trip:
//  - an all-gather appends a 64-byte slot to each rank's chunk (64 bytes keep the next chunk
//    aligned), its first 8 bytes holding (unit + 2); an all-gather copies
//    bytes, so every rank receives every rank's tag unchanged and compares it with its own before
//    it uses a byte of the data;
//  - a reduce-scatter sums, so the id goes as bits: each chunk gets a slot, its element j
//    holding bit j of (unit + 2) as 0 or 1. After the sum, element j is W·bit_j on every rank
//    exactly when all W ranks sent the same id (a sum of W zeros and ones is W only if all are
//    one, 0 only if all are zero). B = bit width of (units + 2); the sums are exact while W is
//    within the dtype's exact integers (256 ranks for bf16, 2048 for fp16); beyond that, and
//    under qgZ's quantized reduce-scatter, reductions go unchecked.
// Every rank sees the same tags, so every rank raises the same error at the same collective:
// nothing hangs behind it. What the tags cannot see is ranks running a different number of
// collectives whose sizes differ (DESIGN.md, "Known limitations").

namespace {

std::string common_prefix(const Stage3Layout& layout, const Stage3Unit& u) {
  std::string prefix;
  bool first = true;
  for (int i : u.params) {
    const std::string& name = layout.params()[i].name;
    if (first) {
      prefix = name;
      first = false;
      continue;
    }
    size_t n = 0;
    while (n < prefix.size() && n < name.size() && prefix[n] == name[n]) ++n;
    prefix.resize(n);
  }
  // Back to whole dotted components, without the parameter's own name: the module's path.
  const size_t dot = prefix.rfind('.');
  prefix.resize(dot == std::string::npos ? 0 : dot);
  return prefix;
}

int64_t tag_of(int unit) { return static_cast<int64_t>(unit) + 2; }

int64_t slot_elements(at::ScalarType dtype) {
  return kTagSlotBytes / static_cast<int64_t>(c10::elementSize(dtype));
}

std::string label_of_tag(const Stage3Layout& layout, int64_t tag) {
  if (tag < 1 || tag > layout.num_units() + 2) {
    return "a collective that is not a unit gather (" + std::to_string(tag) + ")";
  }
  return unit_label(layout, static_cast<int>(tag - 2));
}

const char* const kFix =
    ". Every rank must gather and reduce the same ZeRO-3 units in the same order: put modules "
    "that only some ranks run (routed experts, early exits) together in one ShardUnit, so that "
    "they are gathered and reduced as one whatever the data routes";

}  // namespace

bool unit_tags_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("ZRT_UNIT_TAGS");
    if (v == nullptr || *v == '\0' || std::string(v) == "1") return true;
    ZRT_CHECK_AS(ConfigError, std::string(v) == "0", "ZRT_UNIT_TAGS must be 0 or 1, got '", v,
                 "'");
    return false;
  }();
  return enabled;
}

std::string unit_label(const Stage3Layout& layout, int unit) {
  if (unit < 0) return "the persistent parameters";
  if (unit >= layout.num_units()) return "the parameters in no unit";
  const std::string prefix = common_prefix(layout, layout.units()[unit]);
  return "unit " + std::to_string(unit) + (prefix.empty() ? "" : " (" + prefix + ")");
}

UnitContexts::UnitContexts(const Stage3Layout& layout, const std::string& what) {
  const int n = layout.num_units();
  for (int unit = 0; unit < n; ++unit) labels_.push_back("ZeRO-3 " + what + " of " + unit_label(layout, unit));
  labels_.push_back("ZeRO-3 " + what + " of " + unit_label(layout, -1));
  labels_.push_back("ZeRO-3 " + what + " of " + unit_label(layout, n));
}

const std::string& UnitContexts::operator[](int unit) const {
  const int n = static_cast<int>(labels_.size()) - 2;
  if (unit < 0) return labels_[n];
  return labels_[std::min(unit, n + 1)];
}

int64_t gather_tag_elements(at::ScalarType dtype) {
  return unit_tags_enabled() ? slot_elements(dtype) : 0;
}

void write_gather_tag(const at::Tensor& slot, int unit) {
  if (slot.numel() == 0) return;
  const int64_t tag = tag_of(unit);
  if (slot.device().is_cpu()) {  // straight into the send buffer
    slot.zero_();
    std::memcpy(slot.data_ptr(), &tag, sizeof tag);
    return;
  }
  at::Tensor host = at::zeros({slot.numel()}, slot.options().device(at::kCPU).pinned_memory(false));
  std::memcpy(host.data_ptr(), &tag, sizeof tag);
  slot.copy_(host);
}

void check_gather_tags(const Stage3Layout& layout, const at::Tensor& gathered, int64_t stride,
                       int64_t offset, int ranks, int rank, int unit,
                       const std::string& group) {
  const int64_t elems = gather_tag_elements(gathered.scalar_type());
  if (elems == 0) return;
  // One [ranks, elems] view of every rank's slot: a single copy off the device, none on the CPU.
  const at::Tensor tags =
      gathered.view({ranks, stride}).narrow(1, offset, elems).to(at::kCPU).contiguous();
  const auto* bytes = static_cast<const char*>(tags.data_ptr());
  const int64_t mine = tag_of(unit);
  for (int r = 0; r < ranks; ++r) {
    int64_t tag = 0;
    std::memcpy(&tag, bytes + r * elems * tags.element_size(), sizeof tag);
    ZRT_CHECK_AS(CommError, tag == mine, "ZeRO-3 ranks out of step: rank ", rank, group,
                 " all-gathered ", unit_label(layout, unit), " while rank ", r, " all-gathered ",
                 label_of_tag(layout, tag), kFix);
  }
}

int reduce_tag_bits(int units, int ranks, at::ScalarType dtype) {
  int64_t exact = int64_t{1} << 24;  // fp32's integers
  if (dtype == at::kBFloat16) exact = 256;
  if (dtype == at::kHalf) exact = 2048;
  if (dtype == at::kDouble) exact = int64_t{1} << 53;
  if (ranks > exact || !unit_tags_enabled()) return 0;
  int bits = 0;
  for (int64_t v = tag_of(units); v > 0; v >>= 1) ++bits;
  return bits;
}

int64_t reduce_tag_elements(int bits, at::ScalarType dtype) {
  const int64_t slot = slot_elements(dtype);
  return (bits + slot - 1) / slot * slot;
}

void write_reduce_tag(const at::Tensor& send, int64_t stride, int64_t offset, int bits, int ranks,
                      int unit) {
  if (bits == 0) return;
  std::vector<float> bit_values(bits);
  for (int j = 0; j < bits; ++j) bit_values[j] = static_cast<float>((tag_of(unit) >> j) & 1);
  const at::Tensor values = at::from_blob(bit_values.data(), {1, bits}, at::kFloat);
  send.view({ranks, stride}).narrow(1, offset, bits).copy_(values.expand({ranks, bits}));
}

void check_reduce_tag(const Stage3Layout& layout, const at::Tensor& reduced, int64_t offset,
                      int bits, int ranks, int rank, int unit) {
  if (bits == 0) return;
  const at::Tensor sums = reduced.narrow(0, offset, bits).to(at::kCPU, at::kDouble).contiguous();
  const double* s = sums.data_ptr<double>();
  const int64_t mine = tag_of(unit);
  bool same = true;
  int64_t other = 0;  // with two ranks: the other rank's tag
  for (int j = 0; j < bits; ++j) {
    const int64_t bit = (mine >> j) & 1;
    same = same && s[j] == static_cast<double>(bit * ranks);
    other |= (static_cast<int64_t>(s[j] + 0.5) - bit) << j;
  }
  if (same) return;
  const std::string who =
      ranks == 2 ? str("rank ", 1 - rank, " reduce-scattered the gradients of ",
                       label_of_tag(layout, other))
                 : std::string("at least one other rank reduce-scattered another unit's gradients");
  throw CommError(str("ZeRO-3 ranks out of step: rank ", rank,
                      " reduce-scattered the gradients of ", unit_label(layout, unit), " while ",
                      who, kFix));
}

}  // namespace zrt::zero
