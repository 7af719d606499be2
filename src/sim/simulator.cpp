#include "xstage/model/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <queue>

#include <fmt/format.h>

#include "xstage/core/error.hpp"
#include "xstage/core/limits.hpp"
#include "xstage/model/model.hpp"

namespace xstage {

StageConfig stage_from_profile(const Profile& p) {
  StageConfig c;
  c.R_Bps = p.R_Bps;
  c.Q_bytes = p.Q_bytes;
  c.Q_fill_bytes = p.fill_capacity();
  c.Q_cold_bytes = p.Q_cold_bytes;
  c.Q_warm_per_byte = p.Q_warm_per_byte;
  c.issue = p.t0;
  return c;
}

namespace {

enum class Phase { done, computing, fixed_cost, issuing, waiting };

struct ProducerState {
  Phase phase = Phase::done;
  long rep = 0;
  size_t step = 0;
  long bursts = 0;
  double burst_start = 0;
  double burst_bytes = 0;
  double far_bytes = 0;   // what it issues at the producer's rate after its near queue
  double stall_mark = 0;  // stall integral when the burst started issuing
  long busy_period = -1;  // the stage's busy period in which it last started issuing
  bool first_of_period = false;  // its burst now issuing is its first of that busy period
  // wait_drain: the drained-bytes mark to reach, and which of its two ends has come.
  double wait_start = 0, wait_compute_end = 0;
  bool wait_computed = false, wait_drained = false;
};

// Counts finished bursts over every stage of one simulate() call for the
// observer's on_progress.
struct ProgressCount {
  const SimObserver* observer = nullptr;
  double total = 0;
  long done = 0;
  long next_report = kProgressEvery;
  static constexpr long kProgressEvery = 1 << 20;
  void burst_done() {
    if (++done < next_report) return;
    next_report += kProgressEvery;
    if (observer->on_progress && total > 0) observer->on_progress(std::min(1.0, done / total));
  }
};

using Timed = std::pair<double, int>;  // (time, producer)
using MinHeap = std::priority_queue<Timed, std::vector<Timed>, std::greater<>>;

// One stage (capacity Q, drain R) fed by a set of producers.
// Rates are in bytes per ns.
class StageSim {
 public:
  StageSim(const StageConfig& c, const std::vector<Program>& progs, int stage_id, SimResult& out,
           const SimObserver& observer, ProgressCount& progress, const StepFeed* feed = nullptr)
      : observer_(observer), progress_(progress), R_late_(c.R_Bps * 1e-9),
        R_early_(c.R_early_Bps > 0 && c.R_early_until_ns > 0 ? c.R_early_Bps * 1e-9 : R_late_),
        early_until_(c.R_early_Bps > 0 ? c.R_early_until_ns : 0.0), R_(R_early_), Q_(c.Q_bytes), Qfill_(c.Q_fill_bytes > 0 ? std::min(c.Q_fill_bytes, c.Q_bytes) : c.Q_bytes),
        Qcold_(std::min(c.Q_cold_bytes, c.Q_bytes)), warm_(c.Q_warm_per_byte),
        cap_(Q_), rp_(c.issue.per_producer_Bps * 1e-9), near_(c.issue.near_bytes),
        rn_(c.issue.near_bytes > 0 ? c.issue.near_per_producer_Bps * 1e-9 : 0.0),
        ragg_(c.issue.aggregate_Bps * 1e-9), fixed_(c.issue.fixed_ns), record_(c.record_timeline),
        stage_id_(stage_id), feed_(feed), fed_(feed ? progs : std::vector<Program>{}), progs_(feed ? fed_ : progs),
        st_(progs.size()), out_(out) {}

  // `ids` maps local producer index to the producer id reported in results.
  void run(const std::vector<int>& ids) {
    ids_ = ids;
    for (size_t i = 0; i < progs_.size(); ++i) advance_program(static_cast<int>(i));
    sample();
    while (true) {
      // The drain rate in force, and when it changes next.
      const bool early = t_ < early_until_;
      R_ = early ? R_early_ : R_late_;
      // Nominal rates: each issuer in its near queue at rn, the others at rp; all together at most ragg.
      const double n_near = static_cast<double>(near_q_.size()), n_far = static_cast<double>(issuers_.size());
      const double nominal = n_near * rn_ + n_far * rp_;
      double scale = nominal > 0 ? std::min(1.0, ragg_ / nominal) : 0.0;  // of every issuer's rate
      const double in_nom = scale * nominal;
      const double epsq = 1e-9 * Q_ + 1e-9;
      cap_ = capacity();
      const bool full = q_ >= cap_ - epsq;
      const bool empty = q_ <= epsq;
      double in = in_nom, slope = in_nom - R_, throttle_loss = 0.0;
      if (full && in_nom > R_) {
        in = R_;
        scale = R_ / nominal;  // the issuers share the drain in proportion to their rates
        slope = 0;
        q_ = std::max(q_, cap_);
        throttle_loss = 1.0 - R_ / in_nom;
      } else if (empty && in_nom <= R_) {
        slope = 0;
        q_ = 0;
      }
      const double per_far = scale * rp_, per_near = scale * rn_;

      double dt = kInf;
      if (!timed_.empty()) dt = std::min(dt, timed_.top().first - t_);
      if (n_far > 0) dt = std::min(dt, (issuers_.top().first - S_) / per_far);
      if (n_near > 0) dt = std::min(dt, (near_q_.top().first - Sn_) / per_near);
      // A non-empty stage drains at R: the next wait_drain mark is reached then.
      if (!drain_waiters_.empty() && q_ > epsq)
        dt = std::min(dt, std::max(0.0, (drain_waiters_.top().first - (stored_ - q_)) / R_));
      else if (!drain_waiters_.empty())
        dt = 0;
      if (slope > 0) dt = std::min(dt, (cap_ - q_) / slope);
      if (slope < 0) dt = std::min(dt, q_ / -slope);
      // The rate's change is an event only while something else is pending.
      if (early && std::isfinite(dt)) dt = std::min(dt, early_until_ - t_);
      if (!std::isfinite(dt)) break;  // nothing left to happen
      dt = std::max(dt, 0.0);

      t_ += dt;
      S_ += per_far * dt;
      Sn_ += per_near * dt;
      stored_ += in * dt;
      q_ = std::clamp(q_ + slope * dt, 0.0, std::max(q_, cap_));
      stall_integral_ += throttle_loss * dt;
      out_.max_occupancy = std::max(out_.max_occupancy, q_);
      high_water_ = std::max(high_water_, q_);

      const double eps_t = 1e-9 * std::max(1.0, t_);
      while (!timed_.empty() && timed_.top().first <= t_ + eps_t) {
        const int i = timed_.top().second;
        timed_.pop();
        on_timed(i);
      }
      const double eps_d = 1e-9 * std::max(1.0, stored_) + 1e-6;
      while (!drain_waiters_.empty() &&
             (q_ <= epsq || drain_waiters_.top().first <= stored_ - q_ + eps_d)) {
        const int i = drain_waiters_.top().second;
        drain_waiters_.pop();
        st_[i].wait_drained = true;
        end_wait_if_done(i);
      }
      const double eps_n = 1e-9 * std::max(1.0, Sn_) + 1e-6;
      while (!near_q_.empty() && near_q_.top().first <= Sn_ + eps_n) {
        const int i = near_q_.top().second;
        near_q_.pop();
        leave_near_queue(i);
      }
      const double eps_s = 1e-9 * std::max(1.0, S_) + 1e-6;
      while (!issuers_.empty() && issuers_.top().first <= S_ + eps_s) {
        const int i = issuers_.top().second;
        issuers_.pop();
        finish_burst(i);
      }
      sample();
    }
    flush_sample();
    last_store_end_ = std::max(last_store_end_, t_);
    out_.total_ns = std::max(out_.total_ns, finish_);
    out_.drained_ns = std::max(out_.drained_ns, t_ + drain_time(q_));
  }

 private:
  // Several events at one instant leave one sample, the last level: the
  // sample is held until time moves on.
  void sample() {
    if (!record_) return;
    if (pending_ && pending_->t_ns == t_) {
      pending_->bytes = q_;
      return;
    }
    flush_sample();
    pending_ = OccupancySample{t_, q_, stage_id_};
  }
  void flush_sample() {
    if (!pending_) return;
    if (observer_.on_sample)
      observer_.on_sample(*pending_);
    else
      out_.timeline.push_back(*pending_);
    pending_.reset();
  }

  // Starts the next step of producer i (skipping empty ones), or marks it done.
  void advance_program(int i) {
    ProducerState& s = st_[i];
    const Program& p = progs_[i];
    while (true) {
      if ((p.steps.empty() || s.rep >= p.repeat) && feed_ && refill(i)) continue;
      if (p.steps.empty() || s.rep >= p.repeat) {
        s.phase = Phase::done;
        finish_ = std::max(finish_, t_);
        return;
      }
      const Step step = p.steps[s.step];
      if (++s.step == p.steps.size()) {
        s.step = 0;
        ++s.rep;
      }
      if (step.kind == Step::Kind::wait_drain) {
        // Requests made now queue behind every byte already stored (FIFO).
        const bool drained = q_ <= 1e-9 * Q_ + 1e-9;
        if (drained && step.amount <= 0) continue;
        s.phase = Phase::waiting;
        s.wait_start = t_;
        s.wait_compute_end = t_ + std::max(0.0, step.amount);
        s.wait_computed = step.amount <= 0;
        s.wait_drained = drained;
        if (!s.wait_computed) timed_.push({s.wait_compute_end, i});
        if (!drained) drain_waiters_.push({stored_, i});
        return;
      }
      if (step.kind == Step::Kind::compute) {
        if (step.amount <= 0) continue;
        s.phase = Phase::computing;
        timed_.push({t_ + step.amount, i});
        return;
      }
      if (step.amount <= 0) continue;
      s.burst_start = t_;
      s.burst_bytes = step.amount;
      if (fixed_ > 0) {
        s.phase = Phase::fixed_cost;
        timed_.push({t_ + fixed_, i});
      } else {
        start_issuing(i);
      }
      return;
    }
  }

  // A fed producer that has run its steps asks for the next ones: false when it has none.
  bool refill(int i) {
    Program& p = fed_[static_cast<size_t>(i)];
    p.steps.clear();
    p.repeat = 1;
    (*feed_)(ids_[static_cast<size_t>(i)], t_, p.steps);
    for (const Step& step : p.steps)
      if (!(step.amount >= 0) || !std::isfinite(step.amount))
        throw Error(fmt::format("simulate: producer {} was fed a step of {} (expected finite, >= 0)",
                                ids_[static_cast<size_t>(i)], step.amount));
    if (!(t_ < kMaxTimeNs))
      throw Error(fmt::format("simulate: fed producers run past {:g} ns; expected a run that ends within {:g} ns", kMaxTimeNs, kMaxTimeNs));
    st_[static_cast<size_t>(i)].step = 0;
    st_[static_cast<size_t>(i)].rep = 0;
    return !p.steps.empty();
  }

  // The capacity in force. A busy period begins with a burst on an empty
  // stage; while a producer issues its first burst of the busy period the
  // stage offers all of Q (after a cold start: what it has regained, min(Q,
  // Q_cold + warm x stored)). Otherwise Q_fill, or the highest level of this
  // busy period if that is higher: a stage that held that much a gap ago
  // holds it again. (With Q_fill alone, a Q_fill below R G would empty the
  // stage in every gap, and the drain regime would lose the model's V/R - G.)
  // Producers in lock step start and end their first bursts together, and
  // the level peaks at their end: Q for the first burst, then the level it
  // ended at. Decided per producer, not per burst start, so that producers a
  // little apart see what producers in lock step see (the probe's --stagger:
  // staggered first bursts are absorbed as coincident ones are,
  // results/h200/probe/stagger/), and the order of events at one instant
  // does not change it.
  double capacity() const {
    return first_bursts_issuing_ > 0 ? first_cap_ : std::min(Q_, std::max(Qfill_, high_water_));
  }

  void start_issuing(int i) {
    // A new busy period: an empty stage with no burst issuing (producers in
    // lock step that start together open one period, not one each).
    if (q_ <= 1e-9 * Q_ + 1e-9 && issuers_.empty() && near_q_.empty()) {
      ++busy_period_;
      high_water_ = 0;
      first_cap_ = Qcold_ > 0 ? std::min(Q_, Qcold_ + warm_ * stored_) : Q_;
    }
    ProducerState& s = st_[i];
    s.first_of_period = s.busy_period != busy_period_;
    s.busy_period = busy_period_;
    first_bursts_issuing_ += s.first_of_period;
    s.phase = Phase::issuing;
    s.stall_mark = stall_integral_;
    const double near = rn_ > 0 ? std::min(s.burst_bytes, near_) : 0.0;
    s.far_bytes = s.burst_bytes - near;
    if (near > 0)
      near_q_.push({Sn_ + near, i});
    else
      issuers_.push({S_ + s.far_bytes, i});
  }

  // Producer i has issued its near queue's share: the rest at the producer's rate.
  void leave_near_queue(int i) {
    if (st_[i].far_bytes > 0)
      issuers_.push({S_ + st_[i].far_bytes, i});
    else
      finish_burst(i);
  }

  void on_timed(int i) {
    if (st_[i].phase == Phase::fixed_cost) {
      start_issuing(i);
    } else if (st_[i].phase == Phase::waiting) {
      st_[i].wait_computed = true;
      end_wait_if_done(i);
    } else {
      advance_program(i);
    }
  }

  // A wait_drain step ends when both its compute and the drain it waits for are done.
  void end_wait_if_done(int i) {
    ProducerState& s = st_[i];
    if (s.phase != Phase::waiting || !s.wait_computed || !s.wait_drained) return;
    out_.drain_wait_ns += std::max(0.0, t_ - s.wait_compute_end);
    advance_program(i);
  }

  void finish_burst(int i) {
    ProducerState& s = st_[i];
    first_bursts_issuing_ -= s.first_of_period;
    s.first_of_period = false;
    BurstSpan b;
    b.producer = ids_[i];
    b.index = s.bursts++;
    b.start_ns = s.burst_start;
    b.end_ns = t_;
    b.bytes = s.burst_bytes;
    b.stall_ns = stall_integral_ - s.stall_mark;
    out_.stalled_ns += b.stall_ns;
    out_.bytes += b.bytes;
    ++out_.burst_count;
    if (observer_.on_burst)
      observer_.on_burst(b);
    else
      out_.bursts.push_back(b);
    progress_.burst_done();
    advance_program(i);
  }

  // From t_, how long `bytes` left in the stage take to drain.
  double drain_time(double bytes) const {
    if (t_ < early_until_ && bytes > R_early_ * (early_until_ - t_))
      return (early_until_ - t_) + (bytes - R_early_ * (early_until_ - t_)) / R_late_;
    return bytes / (t_ < early_until_ ? R_early_ : R_late_);
  }

  const SimObserver& observer_;
  ProgressCount& progress_;
  std::optional<OccupancySample> pending_;
  const double R_late_, R_early_, early_until_;
  double R_;  // the drain rate in force
  const double Q_, Qfill_, Qcold_, warm_;
  double cap_;  // the capacity in force (capacity())
  long busy_period_ = 0;     // busy periods begun so far
  long first_bursts_issuing_ = 0;  // producers issuing their first burst of this busy period
  double first_cap_ = 0;     // what the stage offers those: Q, or what a cold stage has regained
  double high_water_ = 0;    // the highest level of this busy period
  const double rp_, near_, rn_, ragg_, fixed_;
  const bool record_;
  const int stage_id_;
  const StepFeed* feed_;
  std::vector<Program> fed_;  // fed producers' current steps
  const std::vector<Program>& progs_;
  std::vector<ProducerState> st_;
  std::vector<int> ids_;
  SimResult& out_;
  MinHeap timed_;    // compute and fixed-cost ends
  MinHeap issuers_;  // issuing producers keyed by the per-issuer progress at which they finish
  MinHeap drain_waiters_;  // producers in wait_drain, keyed by the drained-bytes mark they wait for
  MinHeap near_q_;   // producers issuing their near queue's share, keyed by the near progress at which it is done
  double t_ = 0, q_ = 0, S_ = 0, Sn_ = 0, stored_ = 0, stall_integral_ = 0, finish_ = 0, last_store_end_ = 0;
};

}  // namespace

double total_bursts(const std::vector<Program>& producers) {
  double n = 0;
  for (const Program& p : producers) {
    double stores = 0;
    for (const Step& s : p.steps) stores += s.kind == Step::Kind::store && s.amount > 0;
    n += stores * static_cast<double>(std::max(p.repeat, 0L));
  }
  return n;
}

namespace {

// What one producer asks of the stage must stay where doubles keep their
// meaning (xstage/core/limits.hpp): a compute step of 1e308 ns would otherwise push
// the clock where a store's microseconds round to nothing.
void check_program_size(const Program& p, size_t i) {
  double bytes = 0, ns = 0;
  for (const Step& s : p.steps) (s.kind == Step::Kind::store ? bytes : ns) += s.amount;
  const double reps = static_cast<double>(p.repeat);
  if (bytes * reps > kMaxBytes)
    throw Error(fmt::format("simulate: producer {} stores {:g} bytes in all; expected at most {:g} bytes", i,
                            bytes * reps, kMaxBytes));
  if (ns * reps > kMaxTimeNs)
    throw Error(fmt::format("simulate: producer {} computes {:g} ns in all; expected at most {:g} ns", i, ns * reps,
                            kMaxTimeNs));
}

bool all_programs_equal(const std::vector<Program>& producers) {
  for (const Program& p : producers) {
    if (p.repeat != producers[0].repeat || p.steps.size() != producers[0].steps.size()) return false;
    for (size_t k = 0; k < p.steps.size(); ++k)
      if (p.steps[k].kind != producers[0].steps[k].kind || p.steps[k].amount != producers[0].steps[k].amount)
        return false;
  }
  return true;
}

void check_stage(const StageConfig& c) {
  auto positive = [](double v, const char* what) {
    if (!(v > 0) || !std::isfinite(v)) throw Error(fmt::format("simulate: {} is {}; expected a positive finite number", what, v));
  };
  positive(c.R_Bps, "R");
  positive(c.Q_bytes, "Q");
  if (!(c.R_early_Bps >= 0) || !std::isfinite(c.R_early_Bps) || !(c.R_early_until_ns >= 0) ||
      !std::isfinite(c.R_early_until_ns))
    throw Error(fmt::format("simulate: the early drain rate and its end are {} and {}; expected both finite and >= 0",
                            c.R_early_Bps, c.R_early_until_ns));
  positive(c.issue.per_producer_Bps, "the per-producer issue rate");
  positive(c.issue.aggregate_Bps, "the aggregate issue rate");
  if (!(c.issue.fixed_ns >= 0)) throw Error(fmt::format("simulate: the fixed issue cost is {} ns; expected 0 ns or more", c.issue.fixed_ns));
  if (!(c.issue.near_bytes >= 0)) throw Error(fmt::format("simulate: the near queue's bytes are {}; expected 0 or more", c.issue.near_bytes));
  if (c.issue.near_bytes > 0) positive(c.issue.near_per_producer_Bps, "the near queue's issue rate");
  if (!(c.Q_cold_bytes >= 0) || !(c.Q_warm_per_byte >= 0))
    throw Error(fmt::format("simulate: the cold capacity and the regain per byte are {} and {}; expected both >= 0", c.Q_cold_bytes, c.Q_warm_per_byte));
}

}  // namespace

SimResult simulate(const StageConfig& c, const std::vector<Program>& producers, const SimObserver& observer) {
  check_stage(c);
  if (producers.empty()) throw Error("simulate: no producers; expected at least one program");
  if (producers.size() > static_cast<size_t>(kMaxProducers))
    throw Error(fmt::format("simulate: {} producers; expected at most {}", producers.size(), kMaxProducers));
  for (size_t i = 0; i < producers.size(); ++i) {
    if (producers[i].repeat < 0) throw Error(fmt::format("simulate: producer {}: repeat {}; expected 0 or more", i, producers[i].repeat));
    for (const Step& s : producers[i].steps)
      if (!(s.amount >= 0) || !std::isfinite(s.amount))
        throw Error(fmt::format("simulate: producer {}: a step of {}; expected finite amounts >= 0", i, s.amount));
    check_program_size(producers[i], i);
  }
  const double bursts = total_bursts(producers);
  if (bursts > kMaxSimulatedBursts)
    throw Error(fmt::format("simulate: {:g} bursts over all producers; expected at most {:g} (fewer bursts or "
                            "producers)",
                            bursts, kMaxSimulatedBursts));

  SimResult out;
  ProgressCount progress{&observer, bursts};
  if (!c.per_producer_capacity) {
    std::vector<int> ids(producers.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    StageSim(c, producers, 0, out, observer, progress).run(ids);
    return out;
  }
  const double K = static_cast<double>(producers.size());
  StageConfig part = c;
  part.R_Bps /= K;
  part.R_early_Bps /= K;
  part.Q_bytes /= K;
  part.Q_cold_bytes /= K;  // each producer's stage regains its own share: (Q_cold + warm x n V) / K after n bursts
  part.issue.aggregate_Bps /= K;
  if (all_programs_equal(producers) && !c.record_timeline) {
    // Identical producers on identical private stages run identically: one is
    // simulated and its bursts reported for every producer, index by index.
    SimResult one;
    SimObserver copy_out;
    copy_out.on_burst = [&](const BurstSpan& b) {
      for (size_t i = 0; i < producers.size(); ++i) {
        BurstSpan bi = b;
        bi.producer = static_cast<int>(i);
        if (observer.on_burst)
          observer.on_burst(bi);
        else
          out.bursts.push_back(bi);
        if (i > 0) progress.burst_done();
      }
    };
    StageSim(part, {producers[0]}, 0, one, copy_out, progress).run({0});
    out.total_ns = one.total_ns;
    out.drained_ns = one.drained_ns;
    out.max_occupancy = one.max_occupancy;
    out.stalled_ns = one.stalled_ns * K;
    out.drain_wait_ns = one.drain_wait_ns * K;
    out.bytes = one.bytes * K;
    out.burst_count = one.burst_count * static_cast<long>(producers.size());
    return out;
  }
  for (size_t i = 0; i < producers.size(); ++i) {
    std::vector<Program> one{producers[i]};
    StageSim(part, one, static_cast<int>(i), out, observer, progress).run({static_cast<int>(i)});
  }
  return out;
}

SimResult simulate_fed(const StageConfig& c, int producers, const StepFeed& feed, const SimObserver& observer) {
  if (producers < 1 || producers > kMaxProducers)
    throw Error(fmt::format("simulate: {} fed producers; expected 1 .. {}", producers, kMaxProducers));
  if (!feed) throw Error("simulate: fed producers without a feed; expected a step feed");
  StageConfig shared = c;
  shared.per_producer_capacity = false;
  // The checks of simulate() on the stage, with an empty program for each producer.
  std::vector<Program> empty(static_cast<size_t>(producers));
  check_stage(shared);
  SimResult out;
  ProgressCount progress{&observer, 0};
  std::vector<int> ids(empty.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  StageSim(shared, empty, 0, out, observer, progress, &feed).run(ids);
  return out;
}

std::vector<Program> periodic_programs(int K, double V, double G, long bursts) {
  if (K < 1) throw Error(fmt::format("periodic_programs: K = {}; expected at least 1 producer", K));
  Program p;
  p.steps = {Step::store(V / K), Step::compute(G)};
  p.repeat = bursts;
  return std::vector<Program>(static_cast<size_t>(K), p);
}

std::vector<Program> staggered_programs(int K, double V, double G, long bursts, double spread_ns) {
  if (!(spread_ns >= 0) || !(spread_ns <= kMaxTimeNs))
    throw Error(fmt::format("staggered_programs: the spread is {} ns; expected a time in [0, {:g}] ns", spread_ns,
                            kMaxTimeNs));
  if (double(K) * double(bursts) > kMaxStaggeredBursts)
    throw Error(fmt::format("staggered_programs: K x bursts = {} x {}; expected at most {:g} bursts unrolled", K, bursts,
                            kMaxStaggeredBursts));
  std::vector<Program> progs = periodic_programs(K, V, G, bursts);
  for (size_t k = 0; k < progs.size(); ++k) {
    Program& p = progs[k];
    std::vector<Step> steps{Step::compute(K > 1 ? spread_ns * double(k) / double(K - 1) : 0.0)};
    steps.reserve(1 + p.steps.size() * size_t(std::max(p.repeat, 0L)));
    for (long r = 0; r < p.repeat; ++r) steps.insert(steps.end(), p.steps.begin(), p.steps.end());
    p.steps = std::move(steps);
    p.repeat = 1;
  }
  return progs;
}

SteadyIssueTracker::SteadyIssueTracker(size_t producers, long skip) : producers_(producers), skip_(skip) {
  if (producers < 1) throw Error("SteadyIssueTracker: expected at least one producer");
}

void SteadyIssueTracker::add(const BurstSpan& b) {
  if (b.index < skip_) return;
  if (producers_ == 1) return settle(b.issue_ns());
  Open& o = open_[b.index];
  o.slowest_ns = std::max(o.slowest_ns, b.issue_ns());
  if (++o.seen < producers_) return;
  settle(o.slowest_ns);
  open_.erase(b.index);
}

void SteadyIssueTracker::settle(double slowest_ns) {
  ++settled_;
  if (kept_.size() < kExactValues) {
    kept_.push_back(slowest_ns);
    return;
  }
  // Reservoir sampling: every settled index is kept with the same probability.
  std::uniform_int_distribution<size_t> pick(0, settled_ - 1);
  const size_t j = pick(rng_);
  if (j < kept_.size()) kept_[j] = slowest_ns;
}

double SteadyIssueTracker::median() const {
  std::vector<double> v = kept_;
  // Indices not every producer reached (a heterogeneous schedule) count with
  // the producers that did.
  for (const auto& [index, o] : open_) v.push_back(o.slowest_ns);
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

double steady_issue_ns(const SimResult& r, long skip) {
  std::map<long, double> slowest;
  for (const BurstSpan& b : r.bursts)
    if (b.index >= skip) slowest[b.index] = std::max(slowest[b.index], b.issue_ns());
  if (slowest.empty()) return 0.0;
  std::vector<double> v;
  v.reserve(slowest.size());
  for (auto& [k, x] : slowest) v.push_back(x);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace xstage
