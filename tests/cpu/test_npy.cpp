// The .npy reader and writer: round trip, float16 input, and malformed files
// rejected with a message that names the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "util/npy.hpp"
#include "xstage/core/error.hpp"

using namespace xstage;

namespace {
std::string npy_bytes(const std::string& header_dict, const std::string& data, int version = 1) {
  std::string h = header_dict;
  const size_t pre = version == 1 ? 10 : 12;
  h.append((64 - (pre + h.size() + 1) % 64) % 64, ' ');
  h.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(char(version));
  out.push_back(0);
  out.push_back(char(h.size() & 0xff));
  out.push_back(char(h.size() >> 8));
  if (version != 1) out.append(2, '\0');
  return out + h + data;
}

std::string expect_error(const std::string& bytes) {
  try {
    parse_npy(bytes, "x.npy");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}
}  // namespace

TEST(Npy, RoundTripFloat32) {
  const std::vector<size_t> shape{2, 3, 1, 4};
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.25f - 3.f;
  const std::string bytes = format_npy(shape, x.data());
  EXPECT_EQ((bytes.size() - 24 * 4) % 64, 0u);  // header padded to 64 bytes
  const NpyArray a = parse_npy(bytes, "mem");
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.data, x);
  const std::string path = ::testing::TempDir() + "/xstage_npy_roundtrip.npy";
  write_npy(path, shape, x.data());
  const NpyArray b = read_npy(path);
  EXPECT_EQ(b.shape, shape);
  EXPECT_EQ(b.data, x);
}

TEST(Npy, OneDimAndScalarShapes) {
  const float v[3] = {1, 2, 3};
  EXPECT_EQ(parse_npy(format_npy({3}, v), "m").shape, std::vector<size_t>{3});
  EXPECT_NE(format_npy({3}, v).find("(3,)"), std::string::npos);
  EXPECT_EQ(parse_npy(format_npy({}, v), "m").size(), 1u);
}

TEST(Npy, ReadsFloat16AndVersion2) {
  // 1.0, -2.0, 65504 (max half), 2^-24 (smallest subnormal), -0
  const uint16_t h[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000};
  std::string data(reinterpret_cast<const char*>(h), sizeof h);
  const NpyArray a = parse_npy(npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }", data, 2), "m");
  ASSERT_EQ(a.data.size(), 5u);
  EXPECT_EQ(a.data[0], 1.f);
  EXPECT_EQ(a.data[1], -2.f);
  EXPECT_EQ(a.data[2], 65504.f);
  EXPECT_EQ(a.data[3], std::ldexp(1.f, -24));
  EXPECT_TRUE(std::signbit(a.data[4]));
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
}

TEST(Npy, ReadsIntegersExactlyUpTo2To24) {
  int32_t i4[3] = {0, -7, 1 << 24};
  const NpyArray a = parse_npy(
      npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", std::string((const char*)i4, 12)), "i");
  ASSERT_EQ(a.data.size(), 3u);
  EXPECT_EQ(a.data[0], 0.f);
  EXPECT_EQ(a.data[1], -7.f);
  EXPECT_EQ(a.data[2], 16777216.f);
  int64_t i8[2] = {255, (int64_t(1) << 24) + 1};
  const std::string dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }";
  EXPECT_EQ(parse_npy(npy_bytes(dict, std::string((const char*)i8, 8)), "i").data[0], 255.f);
  EXPECT_NE(expect_error(npy_bytes(dict, std::string((const char*)(i8 + 1), 8))).find("at most 2^24"),
            std::string::npos);
}

TEST(Npy, MalformedFilesAreRejected) {
  const std::string four(16, '\0');  // 4 float32
  EXPECT_NE(expect_error("hello").find("not a .npy file"), std::string::npos);
  EXPECT_NE(expect_error(std::string("\x93NUMPY\x01\x00\xff\x00{", 11)).find("truncated"), std::string::npos);
  EXPECT_NE(expect_error(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", four))
                .find("unsupported .npy dtype '<f8'"),
            std::string::npos);
  EXPECT_NE(expect_error(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", four))
                .find("unsupported .npy dtype '>f4'"),
            std::string::npos);
  EXPECT_NE(expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four))
                .find("Fortran order"),
            std::string::npos);
  EXPECT_NE(expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four))
                .find("data size"),
            std::string::npos);
  EXPECT_NE(expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, }", four)).find("'shape'"),
            std::string::npos);
  EXPECT_NE(expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", four))
                .find("not a whole number"),
            std::string::npos);
  EXPECT_NE(expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four, 7))
                .find("version 7"),
            std::string::npos);
  EXPECT_THROW(read_npy("/nonexistent/dir/x.npy"), Error);
}
