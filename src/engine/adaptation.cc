#include "frugal/engine/adaptation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "frugal/engine/gradient_pipeline.h"

namespace frugal::engine {

// Control-plane messages are small and rare (one per decision point), so
// they travel as JSON: easy to log and to extend.

namespace {

// An integer field of type T. JSON has one number type, and nlohmann's get<T>
// converts a float such as 1e300 to T regardless, which is undefined
// behaviour (found by fuzz/control_fuzz.cc): accept integers in T's range only.
template <class T>
T IntegerOf(const nlohmann::json& v, const char* key) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max()) return static_cast<T>(i);
  }
  throw std::out_of_range(std::string("'") + key + "' must be an integer in range, got " + v.dump());
}

template <class T>
T Integer(const nlohmann::json& j, const char* key) {
  return IntegerOf<T>(j.at(key), key);
}

}  // namespace

std::vector<uint8_t> WorkerTelemetry::Serialize() const {
  nlohmann::json j = {{"rank", rank},           {"iterations", iterations}, {"window_s", window_s},
                      {"samples", samples},     {"compute_s", compute_s},   {"wait_s", wait_s},
                      {"sparsify_s", sparsify_s}, {"optimizer_s", optimizer_s}, {"link_bytes", link_bytes},
                      {"link_busy_s", link_busy_s}, {"link_messages", link_messages}};
  std::string s = j.dump();
  return std::vector<uint8_t>(s.begin(), s.end());
}

Result<WorkerTelemetry> WorkerTelemetry::Deserialize(const std::vector<uint8_t>& bytes) {
  try {
    auto j = nlohmann::json::parse(bytes.begin(), bytes.end());
    WorkerTelemetry t;
    t.rank = Integer<int>(j, "rank");
    t.iterations = Integer<int64_t>(j, "iterations");
    t.window_s = j.at("window_s");
    t.samples = Integer<int64_t>(j, "samples");
    t.compute_s = j.at("compute_s");
    t.wait_s = j.at("wait_s");
    t.sparsify_s = j.at("sparsify_s");
    t.optimizer_s = j.at("optimizer_s");
    t.link_bytes = j.at("link_bytes");
    t.link_busy_s = j.at("link_busy_s");
    t.link_messages = j.value("link_messages", 0.0);  // optional: absent from older peers
    return t;
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("malformed telemetry message: ") + e.what());
  }
}

std::vector<uint8_t> Decision::Serialize() const {
  nlohmann::json j = {{"effective_iteration", effective_iteration},
                      {"density", density},
                      {"batch_sizes", batch_sizes},
                      {"lr_scale", lr_scale},
                      {"bandwidth_mbit", bandwidth_mbit},
                      {"predicted_iteration_s", predicted_iteration_s},
                      {"reason", reason}};
  std::string s = j.dump();
  return std::vector<uint8_t>(s.begin(), s.end());
}

Result<Decision> Decision::Deserialize(const std::vector<uint8_t>& bytes) {
  try {
    auto j = nlohmann::json::parse(bytes.begin(), bytes.end());
    Decision d;
    d.effective_iteration = Integer<int64_t>(j, "effective_iteration");
    d.density = j.at("density");
    for (const nlohmann::json& b : j.at("batch_sizes")) d.batch_sizes.push_back(IntegerOf<int64_t>(b, "batch_sizes"));
    d.lr_scale = j.at("lr_scale");
    d.bandwidth_mbit = j.at("bandwidth_mbit");
    d.predicted_iteration_s = j.at("predicted_iteration_s");
    d.reason = j.at("reason");
    if (!(d.density > 0) || d.density > 1 || !(d.lr_scale > 0)) {
      return Status::Corruption("decision has an out-of-range density or learning-rate scale");
    }
    for (int64_t b : d.batch_sizes) {
      if (b <= 0) return Status::Corruption("decision has a non-positive batch size");
    }
    return d;
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("malformed decision message: ") + e.what());
  }
}

// Note [Density warm-up]
// Error feedback at a low density starts slowly: in the first steps the
// residuals hold most of the gradient and the update is a thin slice of it
// (mlp, int4 at 3%: 50% test accuracy after 25 steps against 68% for
// PowerSGD and DDP). DGC sends more while the model changes fastest and
// decays to the target density over the first epochs; here the density falls
// geometrically from 25% to the target over --density-warmup-steps, a pure
// function of t, so every rank picks the same density without messages and a
// resumed run continues the schedule.
double WarmupDensity(double density, int64_t t, int64_t warmup_steps) {
  if (warmup_steps <= 0 || t >= warmup_steps || density >= kWarmupStartDensity) return density;
  const double left = 1.0 - static_cast<double>(std::max<int64_t>(t, 0)) / static_cast<double>(warmup_steps);
  return std::min(1.0, density * std::pow(kWarmupStartDensity / density, left));
}

// Note [Small buckets whole]
// Parameters are never split across buckets, so a model's biases, small
// layers and heads land in small buckets (mlp: fc1.bias, 2048 values, and
// fc2.bias + fc3, 22,538, against 1.6 M and 4.2 M for the two big weights;
// cnn: the convolutions, about 19 K values, and fc2, 5.6 K, against fc1's
// 1.6 M). At the bucket's density such a bucket sends a few blocks per step,
// although its values move the loss most per byte: on cnn, sending these two
// whole raised the final accuracy by 0.37 points on the mean of three seeds.
// The rule is relative to the model: the smallest
// buckets go whole while together they hold at most --whole-bucket-share of
// the values (2% by default, which bounds the extra bytes whatever the
// bucket layout; a model of many equal buckets sends none whole), plus any
// bucket of at most --dense-bucket-max values. A whole bucket is still
// error-fed: its integer rounding goes to the residual.
std::vector<bool> WholeBuckets(const std::vector<uint64_t>& bucket_values, double share, uint64_t dense_bucket_max) {
  std::vector<bool> whole(bucket_values.size(), false);
  std::vector<size_t> order(bucket_values.size());
  long double total = 0;
  for (size_t i = 0; i < bucket_values.size(); ++i) {
    order[i] = i;
    total += bucket_values[i];
    whole[i] = bucket_values[i] <= dense_bucket_max;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bucket_values[a] < bucket_values[b]; });
  const long double budget = static_cast<long double>(std::clamp(share, 0.0, 1.0)) * total;
  long double taken = 0;
  for (size_t i : order) {
    if (taken + bucket_values[i] > budget) break;
    taken += bucket_values[i];
    whole[i] = true;
  }
  return whole;
}

}  // namespace frugal::engine
