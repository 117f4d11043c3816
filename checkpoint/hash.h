// Checksums used by the checkpoint format: CRC-32 (the zip / IEEE 802.3 polynomial, as in the .pt
// container and our manifest) and SHA-1 (DeepSpeed's cross-rank tag check, spec §1.9). Both are
// small portable implementations written for ZeroRT; no LibTorch, no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace zrt::ckpt {

// CRC-32 (reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF). Incremental:
// crc = crc32_update(crc32_update(0, a, na), b, nb) equals the CRC of a followed by b.
uint32_t crc32_update(uint32_t crc, const void* data, size_t size);
inline uint32_t crc32(const void* data, size_t size) { return crc32_update(0, data, size); }
// "0a1b2c3d"
std::string crc32_hex(uint32_t crc);

// SHA-1 (FIPS 180-4), streaming.
class Sha1 {
 public:
  Sha1();
  void update(const void* data, size_t size);
  // The 20-byte digest; the object must not be updated afterwards.
  std::array<uint8_t, 20> finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[5];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::array<uint8_t, 20> sha1(const std::string& text);
std::string sha1_hex(const std::string& text);
// A digest as 40 lowercase hex digits.
std::string sha1_hex(const std::array<uint8_t, 20>& digest);

}  // namespace zrt::ckpt
