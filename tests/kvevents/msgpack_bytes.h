// MsgpackBytes: writes msgpack byte by byte from the specification
// (github.com/msgpack/msgpack/blob/master/spec.md), independently of the
// msgpack-c library the code under test uses, so fixtures check the decoder
// against the format rather than against the same library's encoder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvroute::kvevents::testing {

class MsgpackBytes {
 public:
  MsgpackBytes& Array(uint32_t n) { return Header(n, 0x90, 0xdc, 0xdd); }
  MsgpackBytes& Map(uint32_t n) { return Header(n, 0x80, 0xde, 0xdf); }
  MsgpackBytes& Nil() { return Byte(0xc0); }
  MsgpackBytes& Str(std::string_view s) {
    if (s.size() < 32) {
      Byte(0xa0 | s.size());
    } else {
      Byte(0xd9).Byte(s.size());
    }
    out_.append(s);
    return *this;
  }
  MsgpackBytes& Bin(std::string_view b) {
    Byte(0xc4).Byte(b.size());
    out_.append(b);
    return *this;
  }
  MsgpackBytes& UInt(uint64_t v) {
    if (v < 128) return Byte(v);
    if (v < 256) return Byte(0xcc).Byte(v);
    if (v < 65536) return Byte(0xcd).BigEndian(v, 2);
    if (v < (uint64_t{1} << 32)) return Byte(0xce).BigEndian(v, 4);
    return Byte(0xcf).BigEndian(v, 8);
  }
  MsgpackBytes& Int(int64_t v) {
    if (v >= 0) return UInt(static_cast<uint64_t>(v));
    if (v >= -32) return Byte(static_cast<uint8_t>(v));
    return Byte(0xd3).BigEndian(static_cast<uint64_t>(v), 8);
  }
  MsgpackBytes& Float64(double d) {
    uint64_t bits;
    static_assert(sizeof bits == sizeof d);
    __builtin_memcpy(&bits, &d, sizeof d);
    return Byte(0xcb).BigEndian(bits, 8);
  }
  MsgpackBytes& Raw(std::string_view bytes) {
    out_.append(bytes);
    return *this;
  }
  const std::string& bytes() const { return out_; }

 private:
  MsgpackBytes& Byte(uint64_t b) {
    out_.push_back(static_cast<char>(b & 0xff));
    return *this;
  }
  MsgpackBytes& BigEndian(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) Byte(v >> (8 * i));
    return *this;
  }
  MsgpackBytes& Header(uint32_t n, uint8_t fix, uint8_t b16, uint8_t b32) {
    if (n < 16) return Byte(fix | n);
    if (n < 65536) return Byte(b16).BigEndian(n, 2);
    return Byte(b32).BigEndian(n, 4);
  }
  std::string out_;
};

}  // namespace kvroute::kvevents::testing
