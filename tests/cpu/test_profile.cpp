#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "xstage/core/error.hpp"
#include "xstage/model/profile.hpp"

using namespace xstage;

TEST(Profile, EmbeddedProfilesAreLabelled) {
  const auto& all = embedded_profiles();
  ASSERT_GE(all.size(), 3u);
  const Profile* host = find_embedded_profile("h200-host-pcie");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(default_profile().name, "h200-host-pcie");
  const Profile* nv4 = find_embedded_profile("h200-nvlink4-nominal");
  const Profile* nv5 = find_embedded_profile("b200-nvlink5-nominal");
  ASSERT_NE(nv4, nullptr);
  ASSERT_NE(nv5, nullptr);
  EXPECT_EQ(nv4->status, "nominal");
  EXPECT_EQ(nv5->status, "nominal");
  EXPECT_DOUBLE_EQ(nv5->R_Bps, 717e9);  // as the paper reports
  EXPECT_TRUE(host->status == "placeholder" || host->status == "measured");
  for (const auto& p : all) EXPECT_NO_THROW(p.validate()) << p.name;
}

TEST(Profile, JsonRoundTrip) {
  Profile p = default_profile();
  p.duplex_read_Bps = p.duplex_store_Bps = p.duplex_read_alone_Bps = 0;  // first without, then with
  p.K_range = Range{1, 132};
  p.sigma = Uncertainty{1, 2, 3, 4, 5};
  const std::string path = ::testing::TempDir() + "/roundtrip.json";
  save_profile(p, path);
  const Profile q = load_profile(path);
  EXPECT_EQ(q.name, p.name);
  EXPECT_DOUBLE_EQ(q.R_Bps, p.R_Bps);
  EXPECT_DOUBLE_EQ(q.Q_bytes, p.Q_bytes);
  EXPECT_DOUBLE_EQ(q.t0.per_producer_Bps, p.t0.per_producer_Bps);
  ASSERT_TRUE(q.K_range.has_value());
  EXPECT_DOUBLE_EQ(q.K_range->hi, 132);
  ASSERT_TRUE(q.sigma.has_value());
  EXPECT_DOUBLE_EQ(q.sigma->Q_bytes, 5);
  EXPECT_FALSE(q.has_duplex());
  p.duplex_read_Bps = 28e9;
  p.duplex_store_Bps = 50e9;
  save_profile(p, path);
  const Profile d = load_profile(path);
  EXPECT_TRUE(d.has_duplex());
  EXPECT_DOUBLE_EQ(d.duplex_read_Bps, 28e9);
  EXPECT_DOUBLE_EQ(d.duplex_store_Bps, 50e9);
  EXPECT_DOUBLE_EQ(d.duplex_read_alone_Bps, 0.0);
  EXPECT_DOUBLE_EQ(d.copy_read_Bps(), d.R_Bps);
  p.duplex_read_alone_Bps = 0.5 * p.R_Bps;
  save_profile(p, path);
  EXPECT_DOUBLE_EQ(load_profile(path).copy_read_Bps(), 0.5 * p.R_Bps);
  std::remove(path.c_str());
  // The measured H200 paths carry theirs (results/h200x2/duplex/).
  for (const char* name : {"h200-host-pcie", "h200-peer", "h200-local"}) {
    const Profile* e = find_embedded_profile(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_TRUE(e->has_duplex()) << name;
    EXPECT_LT(e->duplex_read_Bps, e->R_Bps) << name;
  }
}

namespace {
std::string load_error(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/bad_profile.json";
  std::ofstream(path) << text;
  try {
    load_profile(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Profile, InvalidProfilesAreRejectedWithTheReason) {
  EXPECT_NE(load_error("{ not json").find("invalid JSON"), std::string::npos);
  EXPECT_NE(load_error("[1,2]").find("not a profile; expected a JSON object"), std::string::npos);
  EXPECT_NE(load_error(R"({"R_Bps": 1, "Q_bytes": 1})").find("missing object 't0'"), std::string::npos);
  EXPECT_NE(load_error(R"({"t0": {"fixed_ns": 0, "per_producer_Bps": 1, "aggregate_Bps": 1}, "Q_bytes": 1})")
                .find("missing key 'R_Bps'"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"t0": {"fixed_ns": 0, "per_producer_Bps": 1, "aggregate_Bps": 1}, "R_Bps": -5, "Q_bytes": 1})")
                .find("R_Bps is -5; expected a positive finite number"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"t0": {"fixed_ns": 0, "per_producer_Bps": "fast", "aggregate_Bps": 1}, "R_Bps": 1, "Q_bytes": 1})")
                .find("'per_producer_Bps' is not a number; expected a number"),
            std::string::npos);
  const std::string ok_core = R"("t0": {"fixed_ns": 0, "per_producer_Bps": 1, "aggregate_Bps": 1}, "R_Bps": 1, "Q_bytes": 10)";
  EXPECT_NE(load_error("{" + ok_core + R"(, "sigma": {"R_Bps": "wide"}})").find("'R_Bps' is not a number; expected a number"),
            std::string::npos);
  EXPECT_NE(load_error("{" + ok_core + R"(, "latency_ns": 1e400})").find("invalid JSON"), std::string::npos);
  EXPECT_NE(load_error("{" + ok_core + R"(, "Q_fill_bytes": 11})").find("Q_fill_bytes is 11; expected a value in [0, Q_bytes"),
            std::string::npos);
  EXPECT_NE(load_error("{" + ok_core + R"(, "duplex": 5})").find("'duplex' is not an object; expected an object"), std::string::npos);
  EXPECT_NE(load_error("{" + ok_core + R"(, "duplex": {"read_Bps": 1e9}})").find("missing key 'store_Bps'"),
            std::string::npos);
  EXPECT_NE(load_error("{" + ok_core + R"(, "duplex": {"read_Bps": 1e9, "store_Bps": 0}})")
                .find("duplex.store_Bps"),
            std::string::npos);
  try {
    load_profile("no-such-profile");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such file, and no embedded profile"), std::string::npos);
  }
}

TEST(Profile, WarnsOutsideTheFittedRange) {
  Profile p = default_profile();
  p.status = "measured";
  p.K_range = Range{4, 132};
  p.V_range = Range{65536, 8e6};
  EXPECT_TRUE(range_warnings(p, 32, 1e6).empty());
  EXPECT_EQ(range_warnings(p, 264, 1e6).size(), 1u);
  EXPECT_EQ(range_warnings(p, 1, 1e9).size(), 2u);
}
