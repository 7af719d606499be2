#include "npy.hpp"

#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "input_file.hpp"
#include "replace_file.hpp"
#include "xstage/core/error.hpp"

namespace xstage {

size_t NpyArray::size() const {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

// The value of 'key' in the header dict, as raw text (up to the next top-level comma or brace).
std::string dict_value(const std::string& header, const std::string& key, const std::string& where) {
  for (const char quote : {'\'', '"'}) {
    const std::string k = std::string(1, quote) + key + std::string(1, quote);
    const auto pos = header.find(k);
    if (pos == std::string::npos) continue;
    auto colon = header.find(':', pos + k.size());
    if (colon == std::string::npos) break;
    size_t i = colon + 1;
    while (i < header.size() && header[i] == ' ') ++i;
    size_t end = i;
    int depth = 0;
    while (end < header.size()) {
      const char c = header[end];
      if (c == '(' || c == '[') ++depth;
      if (c == ')' || c == ']') --depth;
      if (depth == 0 && (c == ',' || c == '}')) break;
      ++end;
      if (depth < 0) break;
    }
    if (depth != 0) break;
    std::string v = header.substr(i, end - i);
    while (!v.empty() && v.back() == ' ') v.pop_back();
    return v;
  }
  throw Error(fmt::format("{}: malformed .npy header: expected a '{}' entry, got {}", where, key, header));
}

std::vector<size_t> parse_shape(const std::string& v, const std::string& where) {
  if (v.size() < 2 || v.front() != '(' || v.back() != ')')
    throw Error(fmt::format("{}: malformed .npy header: expected a shape tuple like (2, 3), got {}", where, v));
  std::vector<size_t> shape;
  std::string item;
  std::stringstream ss(v.substr(1, v.size() - 2));
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" L"), b = item.find_last_not_of(" L");
    if (a == std::string::npos) continue;  // "(5,)": empty tail
    item = item.substr(a, b - a + 1);
    if (item.find_first_not_of("0123456789") != std::string::npos || item.size() > 15)
      throw Error(fmt::format("{}: malformed .npy header: shape entry '{}' is not a whole number; expected a shape tuple of whole numbers", where, item));
    shape.push_back(std::stoull(item));
  }
  return shape;
}

}  // namespace

NpyArray parse_npy(const std::string& bytes, const std::string& where) {
  static const char magic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, magic, 6) != 0)
    throw Error(fmt::format("{}: not a .npy file: expected the magic \\x93NUMPY at the start", where));
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (size_t(static_cast<unsigned char>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error(fmt::format("{}: truncated .npy header; expected the header length the file's preamble states", where));
    for (int i = 0; i < 4; ++i) header_len |= size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  } else {
    throw Error(fmt::format("{}: .npy format version {}: expected 1, 2 or 3", where, major));
  }
  if (bytes.size() < offset + header_len)
    throw Error(fmt::format("{}: truncated .npy header: expected {} header bytes, the file has {}", where, header_len,
                            bytes.size() - offset));
  const std::string header = bytes.substr(offset, header_len);
  if (header.find('{') == std::string::npos || header.find('}') == std::string::npos)
    throw Error(fmt::format("{}: malformed .npy header: expected a dict, got {}", where, header));

  std::string descr = dict_value(header, "descr", where);
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"')) descr = descr.substr(1, descr.size() - 2);
  int elem = 0;
  bool integer = false;
  if (descr == "<f4" || descr == "=f4")
    elem = 4;
  else if (descr == "<f2" || descr == "=f2")
    elem = 2;
  else if (descr == "<i4" || descr == "=i4")
    elem = 4, integer = true;
  else if (descr == "<i8" || descr == "=i8")
    elem = 8, integer = true;
  else
    throw Error(fmt::format("{}: unsupported .npy dtype '{}': expected little-endian float32 ('<f4'), float16 "
                            "('<f2'), int32 ('<i4') or int64 ('<i8')",
                            where, descr));
  const std::string fortran = dict_value(header, "fortran_order", where);
  if (fortran == "True")
    throw Error(fmt::format("{}: .npy array in Fortran order: expected C order (numpy.ascontiguousarray)", where));
  if (fortran != "False")
    throw Error(fmt::format("{}: malformed .npy header: fortran_order is '{}', expected True or False", where,
                            fortran));
  NpyArray a;
  a.shape = parse_shape(dict_value(header, "shape", where), where);
  // The element count is checked while multiplying: a product that wrapped
  // around could match a short file's size.
  size_t n = 1;
  for (size_t d : a.shape) {
    if (d != 0 && n > (size_t(1) << 40) / d)
      throw Error(fmt::format("{}: .npy shape has more than 2^40 elements; expected at most 2^40", where));
    n *= d;
  }
  const size_t data_bytes = bytes.size() - offset - header_len;
  if (n > (size_t(1) << 40) || data_bytes != n * elem)
    throw Error(fmt::format("{}: .npy data size: expected {} bytes for {} elements of {} bytes, got {}", where,
                            n * elem, n, elem, data_bytes));
  const char* d = bytes.data() + offset + header_len;
  a.data.resize(n);
  if (n == 0) return a;  // memcpy may not be given the null data of an empty vector
  if (integer) {
    // Integers (expert ids) as float: exact up to 2^24 in magnitude.
    for (size_t i = 0; i < n; ++i) {
      int64_t v = 0;
      if (elem == 4) {
        int32_t v32;
        std::memcpy(&v32, d + 4 * i, 4);
        v = v32;
      } else {
        std::memcpy(&v, d + 8 * i, 8);
      }
      if (v > (int64_t(1) << 24) || v < -(int64_t(1) << 24))
        throw Error(fmt::format("{}: integer element {} is {}: expected at most 2^24 in magnitude (read as float)",
                                where, i, v));
      a.data[i] = float(v);
    }
  } else if (elem == 4) {
    std::memcpy(a.data.data(), d, n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, d + 2 * i, 2);
      a.data[i] = half_to_float(h);
    }
  }
  return a;
}

NpyArray read_npy(const std::string& path) {
  return parse_npy(detail::read_whole_file(path, /*binary=*/true, detail::kMaxArrayBytes, "a .npy array"), path);
}

std::string format_npy(const std::vector<size_t>& shape, const float* data) {
  std::string dims;
  size_t n = 1;
  for (size_t d : shape) {
    dims += fmt::format("{}, ", d);
    n *= d;
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (5,) keeps its comma
  if (shape.size() == 1) dims.pop_back();
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  const size_t total = 10 + header.size() + 1;  // + '\n'
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(reinterpret_cast<const char*>(data), n * 4);
  return out;
}

void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data) {
  // Through the one writer: aside and renamed into place, or the process's
  // own stdout; never a half-written array.
  const std::string bytes = format_npy(shape, data);
  detail::write_file_replacing(path, bytes);
}

}  // namespace xstage
