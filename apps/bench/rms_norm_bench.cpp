#include "apps/bench/rms_norm_bench.hpp"

#include "apps/bench/kernel_bench_common.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/kernel_isa.hpp"

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

namespace supernode::apps {

namespace {
namespace kb = kernel_bench;
namespace k = kernels;
using json = nlohmann::json;

// `small`'s hidden size, and how many times one timing repeats the call (a single row takes
// about a microsecond, too short to time alone).
constexpr int64_t dim = 1024;
int64_t calls_per_timing(int64_t rows) {
  return std::max<int64_t>(1, 4096 / rows);
}

} // namespace

json rms_norm_report(int rounds) {
  std::vector<k::kernel_isa> paths;
  for (auto isa : k::all_kernel_isas)
    if (k::kernel_isa_supported(isa)) paths.push_back(isa);
  const k::kernel_isa saved = k::active_kernel_isa();
  json out;
  out["dim"] = dim;
  out["rounds"] = rounds;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> weight(dim);
  for (auto& v : weight) v = d(rng);
  for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{512}}) {
    std::vector<float> x(rows * dim), y(rows * dim);
    for (auto& v : x) v = d(rng);
    const int64_t calls = calls_per_timing(rows);
    std::map<k::kernel_isa, std::vector<double>> us;
    for (int round = 0; round < rounds; ++round)
      for (auto isa : paths) {
        k::set_kernel_isa(isa);
        us[isa].push_back(kb::seconds([&] {
                            for (int64_t c = 0; c < calls; ++c)
                              k::rms_norm(x.data(), rows, dim, dim, weight.data(), 1e-6f, y.data(),
                                          dim);
                          }) *
                          1e6 / static_cast<double>(calls));
      }
    json row{{"rows", rows}};
    const double portable = kb::median(us[k::kernel_isa::portable]);
    for (auto isa : paths) {
      const double median = kb::median(us[isa]);
      row["by_isa"][k::kernel_isa_name(isa)] = {
          {"median_us", kb::round3(median)},
          {"speedup_vs_portable", kb::round3(portable / median)}};
      std::fprintf(stderr, "  rms_norm rows=%-4lld %-11s %9.3f us  x%.2f vs portable\n",
                   static_cast<long long>(rows), k::kernel_isa_name(isa), median,
                   portable / median);
    }
    out["rows"].push_back(row);
  }
  k::set_kernel_isa(saved);
  return out;
}

} // namespace supernode::apps
