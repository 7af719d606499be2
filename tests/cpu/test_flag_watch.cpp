// watch_flags (src/runtime/comm/flag_watch.hpp), the host side of
// UlyssesAttention::check_flags_in_flight: a writer thread stands in for the
// kernel, so that a flag set before its data is shown to be caught.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "runtime/comm/flag_watch.hpp"

using namespace std::chrono_literals;

namespace {

constexpr uint64_t kPoison = ~uint64_t(0);

struct Board {  // n flags, and the datum each one vouches for
  explicit Board(size_t n) : flag(n, 0), data(n, kPoison) {}
  std::vector<uint64_t> flag, data;
  std::vector<const uint64_t*> flags() const {
    std::vector<const uint64_t*> p;
    for (const uint64_t& f : flag) p.push_back(&f);
    return p;
  }
  void store(std::vector<uint64_t>& v, size_t i, uint64_t x) {
    std::atomic_ref<uint64_t>(v[i]).store(x, std::memory_order_release);
  }
  std::string check(size_t i) const {
    const uint64_t d = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(data[i])).load(std::memory_order_relaxed);
    return d == 100 + i ? "" : "datum " + std::to_string(i) + " not there";
  }
};

}  // namespace

TEST(FlagWatch, DataBeforeItsFlagPassesAndCountsTheFlagsSeenWhileTheWriterRan) {
  Board b(64);
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (size_t i = 0; i < b.flag.size(); ++i) {
      b.store(b.data, i, 100 + i);
      b.store(b.flag, i, 7);
      std::this_thread::sleep_for(200us);
    }
    writing = false;
  });
  const xstage::FlagWatch w = xstage::watch_flags(
      b.flags(), 7, 10.0, [&](size_t i) { return b.check(i); }, [&] { return writing.load(); });
  writer.join();
  EXPECT_EQ(w.problem, "");
  EXPECT_TRUE(w.unseen.empty());
  EXPECT_GT(w.seen_while_running, 0);
}

TEST(FlagWatch, AFlagSetBeforeItsDataIsCaught) {
  Board b(8);
  std::thread writer([&] {
    for (size_t i = 0; i < b.flag.size(); ++i) {
      if (i == 5) {  // the bug: flag first, its datum 500 ms later
        b.store(b.flag, i, 7);
        std::this_thread::sleep_for(500ms);
        b.store(b.data, i, 100 + i);
      } else {
        b.store(b.data, i, 100 + i);
        b.store(b.flag, i, 7);
      }
    }
  });
  const xstage::FlagWatch w = xstage::watch_flags(
      b.flags(), 7, 10.0, [&](size_t i) { return b.check(i); }, [] { return true; });
  writer.join();
  EXPECT_EQ(w.problem, "datum 5 not there");
  EXPECT_TRUE(w.unseen.empty());
}

TEST(FlagWatch, AFlagThatNeverComesIsNamedAfterTheTimeoutOrOncePastTheWritersEnd) {
  Board b(4);
  for (size_t i : {0u, 1u, 3u}) b.store(b.data, i, 100 + i), b.store(b.flag, i, 7);
  b.store(b.flag, 2, 6);  // the previous epoch
  // The writer still at work: the watch waits for the deadline.
  auto t0 = std::chrono::steady_clock::now();
  xstage::FlagWatch w = xstage::watch_flags(
      b.flags(), 7, 0.05, [&](size_t i) { return b.check(i); }, [] { return true; });
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
  EXPECT_EQ(w.problem, "");
  EXPECT_EQ(w.unseen, std::vector<size_t>{2});
  EXPECT_EQ(w.seen_while_running, 3);
  // The writer done: one pass, then the watch stops, long before the deadline.
  t0 = std::chrono::steady_clock::now();
  w = xstage::watch_flags(b.flags(), 7, 30.0, [&](size_t i) { return b.check(i); }, [] { return false; });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_EQ(w.problem, "");
  EXPECT_EQ(w.unseen, std::vector<size_t>{2});
  EXPECT_EQ(w.seen_while_running, 0);
}
