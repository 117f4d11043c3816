#include "report/event_file.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "core/error.h"

namespace zrt {
namespace {

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <typename T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Event { double wall_time = 1; int64 step = 2; <payload> }
std::string event_header(int64_t step) {
  std::string e;
  put_varint(e, (1 << 3) | 1);
  put_fixed<double>(e, wall_time());
  put_varint(e, (2 << 3) | 0);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto& t = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = t[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ZRT_CHECK(!ec, "cannot create the TensorBoard folder ", dir, ": ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = (std::filesystem::path(dir) /
           str("events.out.tfevents.", static_cast<int64_t>(wall_time()), ".", host, ".",
               static_cast<int64_t>(getpid())))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  ZRT_CHECK(file_ != nullptr, "cannot create the TensorBoard event file ", path_, ": ",
            std::strerror(errno));
  std::string version = event_header(0);
  put_bytes_field(version, 3, "brain.Event:2");
  write_record(version);
  flush();
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string v;  // Summary.Value { string tag = 1; float simple_value = 2; }
  put_bytes_field(v, 1, tag);
  put_varint(v, (2 << 3) | 5);
  put_fixed<float>(v, static_cast<float>(value));
  std::string summary;  // Summary { repeated Value value = 1; }
  put_bytes_field(summary, 1, v);
  std::string e = event_header(step);
  put_bytes_field(e, 5, summary);
  write_record(e);
}

void EventFileWriter::write_record(const std::string& event) {
  std::string rec;
  const uint64_t len = event.size();
  put_fixed<uint64_t>(rec, len);
  put_fixed<uint32_t>(rec, masked_crc32c(rec.data(), 8));
  rec += event;
  put_fixed<uint32_t>(rec, masked_crc32c(event.data(), event.size()));
  ZRT_CHECK(std::fwrite(rec.data(), 1, rec.size(), file_) == rec.size(),
            "cannot write the TensorBoard event file ", path_, ": ", std::strerror(errno));
}

void EventFileWriter::flush() {
  ZRT_CHECK(std::fflush(file_) == 0, "cannot write the TensorBoard event file ", path_, ": ",
            std::strerror(errno));
}

}  // namespace zrt
