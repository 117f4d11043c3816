#include "checkpoint/hash.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ZRT_CRC_CLMUL 1
#else
#define ZRT_CRC_CLMUL 0
#endif

namespace zrt::ckpt {
namespace {

// Note [CRC-32 by slicing]
// The byte-at-a-time table method has a loop-carried dependency per byte. Slicing by 16 uses 16
// tables, where table k maps a byte to the CRC contribution of that byte followed by k zero bytes,
// so 16 independent lookups are xor-ed per 16-byte step and the dependency chain is per step.
struct CrcTables {
  uint32_t t[16][256];
  CrcTables() {
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
      t[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; ++n) {
      for (int k = 1; k < 16; ++k) t[k][n] = (t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xFF];
    }
  }
};

const CrcTables& tables() {
  static const CrcTables kTables;
  return kTables;
}

inline uint32_t load_le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

inline uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

// Raw table CRC: no pre/post inversion (the state is the running remainder).
uint32_t crc32_tables(uint32_t c, const uint8_t* p, size_t size) {
  const auto& t = tables().t;
  while (size >= 16) {
    const uint32_t a = load_le32(p) ^ c;
    const uint32_t b = load_le32(p + 4);
    const uint32_t d = load_le32(p + 8);
    const uint32_t e = load_le32(p + 12);
    c = t[15][a & 0xFF] ^ t[14][(a >> 8) & 0xFF] ^ t[13][(a >> 16) & 0xFF] ^ t[12][a >> 24] ^
        t[11][b & 0xFF] ^ t[10][(b >> 8) & 0xFF] ^ t[9][(b >> 16) & 0xFF] ^ t[8][b >> 24] ^
        t[7][d & 0xFF] ^ t[6][(d >> 8) & 0xFF] ^ t[5][(d >> 16) & 0xFF] ^ t[4][d >> 24] ^
        t[3][e & 0xFF] ^ t[2][(e >> 8) & 0xFF] ^ t[1][(e >> 16) & 0xFF] ^ t[0][e >> 24];
    p += 16;
    size -= 16;
  }
  while (size--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return c;
}

#if ZRT_CRC_CLMUL
// Note [CRC-32 by carry-less multiplication]
// In the reflected bit order of this CRC, a 128-bit register X holds the polynomial whose x^127
// coefficient is bit 0. Write X = A·x^64 + B with A, B its low and high 64-bit halves. Moving X
// forward by T bits (past T more message bits) needs X·x^T = A·x^(T+64) + B·x^T (mod P).
// PCLMULQDQ of a 64-bit half with a 32-bit reflected constant K (bit j = coefficient of x^(31-j))
// yields half·K·x^33 in the same 128-bit convention, so K1 = x^(T+31) mod P and K2 = x^(T-33) mod P
// give fold(X) = clmul(A, K1) ^ clmul(B, K2) ≡ X·x^T; xor-ing the next data block continues the
// message. Four registers advance by T = 512 bits per 64-byte step, are folded into one (T = 384,
// 256, 128), and the final 16 bytes are reduced with the table method (crc of X·x^32).
// The constants are computed here, not copied.
uint32_t reflect32(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

uint64_t xpow_mod(int n) {  // x^n mod P, normal bit order, reflected to 32 bits
  uint64_t r = 1;
  for (int i = 0; i < n; ++i) {
    r <<= 1;
    if (r & (uint64_t{1} << 32)) r ^= 0x104C11DB7ull;
  }
  return reflect32(static_cast<uint32_t>(r));
}

struct FoldKeys {
  __m128i k512, k384, k256, k128;
  FoldKeys() {
    auto pair = [](int t) {
      return _mm_set_epi64x(static_cast<long long>(xpow_mod(t - 33)),
                            static_cast<long long>(xpow_mod(t + 31)));
    };
    k512 = pair(512);
    k384 = pair(384);
    k256 = pair(256);
    k128 = pair(128);
  }
};

__attribute__((target("pclmul,sse2"))) inline __m128i fold(__m128i x, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

// Processes a multiple of 16 bytes (>= 64) from raw state c; returns the raw state.
__attribute__((target("pclmul,sse2"))) uint32_t crc32_clmul(uint32_t c, const uint8_t* p,
                                                            size_t size) {
  static const FoldKeys keys;
  const auto* q = reinterpret_cast<const __m128i*>(p);
  __m128i x0 = _mm_xor_si128(_mm_loadu_si128(q), _mm_cvtsi32_si128(static_cast<int>(c)));
  __m128i x1 = _mm_loadu_si128(q + 1);
  __m128i x2 = _mm_loadu_si128(q + 2);
  __m128i x3 = _mm_loadu_si128(q + 3);
  q += 4;
  size -= 64;
  for (; size >= 64; size -= 64, q += 4) {
    x0 = _mm_xor_si128(fold(x0, keys.k512), _mm_loadu_si128(q));
    x1 = _mm_xor_si128(fold(x1, keys.k512), _mm_loadu_si128(q + 1));
    x2 = _mm_xor_si128(fold(x2, keys.k512), _mm_loadu_si128(q + 2));
    x3 = _mm_xor_si128(fold(x3, keys.k512), _mm_loadu_si128(q + 3));
  }
  __m128i x = _mm_xor_si128(_mm_xor_si128(fold(x0, keys.k384), fold(x1, keys.k256)),
                            _mm_xor_si128(fold(x2, keys.k128), x3));
  for (; size >= 16; size -= 16, ++q) x = _mm_xor_si128(fold(x, keys.k128), _mm_loadu_si128(q));
  alignas(16) uint8_t last[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(last), x);
  return crc32_tables(0, last, 16);
}

bool have_clmul() {
  static const bool ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
  return ok;
}
#endif

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if ZRT_CRC_CLMUL
  if (size >= 64 && have_clmul()) {
    const size_t bulk = size & ~size_t{15};
    c = crc32_clmul(c, p, bulk);
    p += bulk;
    size -= bulk;
  }
#endif
  return ~crc32_tables(c, p, size);
}

std::string crc32_hex(uint32_t crc) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) s[i] = kDigits[crc & 0xF];
  return s;
}

// ---- SHA-1 ----

Sha1::Sha1() : h_{0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u} {}

void Sha1::block(const uint8_t* p) {
  uint32_t w[80];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) |
           (uint32_t(p[4 * i + 2]) << 8) | uint32_t(p[4 * i + 3]);
  }
  for (int i = 16; i < 80; ++i) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4];
  for (int i = 0; i < 80; ++i) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999u;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1u;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDCu;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6u;
    }
    const uint32_t tmp = rotl(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = rotl(b, 30);
    b = a;
    a = tmp;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
}

void Sha1::update(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_bytes_ += size;
  while (size > 0) {
    const size_t take = std::min(size, sizeof(buffer_) - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ == sizeof(buffer_)) {
      block(buffer_);
      buffered_ = 0;
    }
  }
}

std::array<uint8_t, 20> Sha1::finish() {
  const uint64_t bits = total_bytes_ * 8;
  const uint8_t one = 0x80;
  update(&one, 1);
  const uint8_t zero = 0;
  while (buffered_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(len, 8);
  std::array<uint8_t, 20> out{};
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h_[i] >> (24 - 8 * j));
  }
  return out;
}

std::array<uint8_t, 20> sha1(const std::string& text) {
  Sha1 s;
  s.update(text.data(), text.size());
  return s.finish();
}

std::string sha1_hex(const std::array<uint8_t, 20>& digest) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out += kDigits[b >> 4];
    out += kDigits[b & 0xF];
  }
  return out;
}

std::string sha1_hex(const std::string& text) { return sha1_hex(sha1(text)); }

}  // namespace zrt::ckpt
