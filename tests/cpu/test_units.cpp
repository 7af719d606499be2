#include <gtest/gtest.h>

#include "xstage/core/error.hpp"
#include "xstage/core/units.hpp"

using namespace xstage;

TEST(Units, SizesAsPeopleWriteThem) {
  EXPECT_DOUBLE_EQ(parse_size_bytes("4096"), 4096);
  EXPECT_DOUBLE_EQ(parse_size_bytes("4e6"), 4e6);
  EXPECT_DOUBLE_EQ(parse_size_bytes("2MiB"), 2 * 1048576.0);
  EXPECT_DOUBLE_EQ(parse_size_bytes("64KiB"), 65536);
  EXPECT_DOUBLE_EQ(parse_size_bytes("1GiB"), 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_size_bytes("1.5MB"), 1.5e6);
  EXPECT_DOUBLE_EQ(parse_size_bytes("2M"), 2 * 1048576.0);  // nccl-tests shorthand
  EXPECT_DOUBLE_EQ(parse_size_bytes(" 128B "), 128);
}

TEST(Units, TimesAsPeopleWriteThem) {
  EXPECT_DOUBLE_EQ(parse_time_ns("250"), 250);
  EXPECT_DOUBLE_EQ(parse_time_ns("250ns"), 250);
  EXPECT_DOUBLE_EQ(parse_time_ns("20us"), 20000);
  EXPECT_DOUBLE_EQ(parse_time_ns("20\xC2\xB5s"), 20000);
  EXPECT_DOUBLE_EQ(parse_time_ns("1.5ms"), 1.5e6);
  EXPECT_DOUBLE_EQ(parse_time_ns("2s"), 2e9);
  EXPECT_DOUBLE_EQ(parse_time_ns("0"), 0);
}

void expect_error(auto fn, const std::string& fragment) {
  try {
    fn();
    FAIL() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Units, RejectsBadInputWithTheReason) {
  expect_error([] { parse_size_bytes("-4KiB", "--V"); }, "--V: '-4KiB' is negative");
  expect_error([] { parse_size_bytes("0", "--V"); }, "is zero");
  expect_error([] { parse_size_bytes("abc", "--V"); }, "is not a number");
  expect_error([] { parse_size_bytes("4XB", "--V"); }, "unknown unit 'XB'");
  expect_error([] { parse_size_bytes("", "--V"); }, "empty value");
  expect_error([] { parse_time_ns("-1us", "--G"); }, "negative");
  expect_error([] { parse_time_ns("5 parsecs", "--G"); }, "unknown unit");
  expect_error([] { parse_time_ns("inf", "--G"); }, "not finite");
  expect_error([] { parse_size_bytes("1e308MiB", "--V"); }, "too large");
}

TEST(Units, Formats) {
  EXPECT_EQ(format_bytes(2 * 1048576.0), "2.00 MiB");
  EXPECT_EQ(format_ns(20000), "20.00 us");
  EXPECT_EQ(format_rate(52e9), "52.0 GB/s");
}
