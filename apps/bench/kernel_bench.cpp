#include "apps/bench/kernel_bench.hpp"

#include "apps/bench/kernel_bench_baselines.hpp"
#include "apps/bench/kernel_bench_machine.hpp"
#include "kernels/gemm_fp32.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/kernel_isa.hpp"
#include "kernels/quantize.hpp"
#include "kernels/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace supernode::apps {

namespace {
namespace kb = kernel_bench;
namespace k = kernels;
using json = nlohmann::json;

struct shape {
  const char* name;
  int64_t n, k;
};

// The "small" model's matmuls, [N x K] in PyTorch Linear layout.
constexpr shape all_shapes[] = {{"q_a", 384, 1024},         {"q_b", 768, 384},
                                {"kv_a", 288, 1024},        {"kv_b", 1024, 256},
                                {"o", 1024, 512},           {"dense_gate_up", 5632, 1024},
                                {"dense_down", 1024, 2816}, {"expert_gate_up", 1024, 1024},
                                {"expert_down", 1024, 512}, {"lm_head", 129280, 1024}};
constexpr const char* quick_shapes[] = {
    "q_a", "dense_gate_up", "dense_down", "expert_gate_up", "expert_down", "lm_head"};

struct options {
  int threads = 1;
  bool quick = false;
  std::string onednn_isa = "avx2"; // cap for oneDNN: avx2, avx2_vnni or native
  bool int8_only = false;
  std::vector<k::kernel_isa> isas; // INT8 paths to time; empty: every supported SIMD path
  std::vector<std::string> shapes; // empty: the default set
  std::vector<int64_t> ms;         // empty: the default set
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--threads" && i + 1 < argc) {
      o.threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--onednn-isa" && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "avx2" && v != "avx2_vnni" && v != "native")
        throw std::invalid_argument("--onednn-isa takes avx2, avx2_vnni or native");
      o.onednn_isa = v;
    } else if (a == "--isa" && i + 1 < argc) {
      for (auto& v : split(argv[++i])) {
        k::kernel_isa isa;
        if (!k::parse_kernel_isa(v.c_str(), isa))
          throw std::invalid_argument("--isa takes portable, avx2 or avx_vnni, not '" + v + "'");
        if (!k::kernel_isa_supported(isa))
          throw std::invalid_argument("--isa " + v + ": not supported on this CPU");
        o.isas.push_back(isa);
      }
    } else if (a == "--int8-only") {
      o.int8_only = true;
    } else if (a == "--shapes" && i + 1 < argc) {
      o.shapes = split(argv[++i]);
    } else if (a == "--m" && i + 1 < argc) {
      for (auto& v : split(argv[++i])) o.ms.push_back(std::max<int64_t>(1, std::atoll(v.c_str())));
    } else {
      throw std::invalid_argument(
          "unknown option '" + a +
          "' (expected --threads N, --quick, --onednn-isa avx2|avx2_vnni|native, "
          "--isa avx2,avx_vnni, --int8-only, --shapes a,b, --m 1,8)");
    }
  }
  return o;
}

// Cheap deterministic values: the weights of lm_head alone are 132M numbers.
std::vector<float> pseudo_random(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) / float(1 << 23);
  }
  return v;
}

double seconds(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median of repeated runs after one warm-up; the repetitions fill about `budget` seconds.
double median_seconds(const auto& fn, double budget) {
  const double first = seconds(fn);
  const int reps = static_cast<int>(std::clamp(budget / std::max(first, 1e-7), 3.0, 300.0));
  std::vector<double> t(reps);
  for (auto& x : t) x = seconds(fn);
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

json figures(double secs, int64_t m, const shape& s, double weight_bytes) {
  const double ops = 2.0 * m * s.n * s.k;
  return {
      {"ms", secs * 1e3}, {"gops", ops / secs / 1e9}, {"weight_gbs", weight_bytes / secs / 1e9}};
}

double round3(double v) {
  return std::round(v * 1000.0) / 1000.0;
}

void log_row(const shape& s, int64_t m, const options& opt, const json& row) {
  for (auto isa : opt.isas) {
    const json& f = row["ours_int8_by_isa"][k::kernel_isa_name(isa)];
    std::fprintf(stderr, "  %-15s m=%-4lld %-8s %.3f ms (%.1f GB/s, %.1f GOPS), x%.2f vs oneDNN\n",
                 s.name, static_cast<long long>(m), k::kernel_isa_name(isa), f["ms"].get<double>(),
                 f["weight_gbs"].get<double>(), f["gops"].get<double>(),
                 f.value("speedup_vs_onednn", 0.0));
  }
}

// Runs every implementation on one weight shape for each M.
json bench_shape(const shape& s, const std::vector<int64_t>& ms, const options& opt,
                 k::thread_pool& pool) {
  const auto wf =
      pseudo_random(static_cast<size_t>(s.n * s.k), static_cast<uint64_t>(s.n * 7 + s.k));
  const auto w8 = k::int8_weight::quantize(wf.data(), s.n, s.k);
  const auto w32 = k::fp32_weight::pack(wf.data(), s.n, s.k);
  std::vector<int8_t> w_plain(static_cast<size_t>(s.n * s.k));
  std::vector<float> w_scale(static_cast<size_t>(s.n));
  for (int64_t r = 0; r < s.n; ++r)
    w_scale[r] = k::quantize_row(wf.data() + r * s.k, s.k, w_plain.data() + r * s.k);

  const double budget = opt.quick ? 0.12 : 0.3;
  json rows = json::array();
  for (int64_t m : ms) {
    const auto x = pseudo_random(static_cast<size_t>(m * s.k), static_cast<uint64_t>(m + 99));
    std::vector<float> y(static_cast<size_t>(m * s.n));
    k::quantized_rows xq;
    json row{{"shape", s.name}, {"n", s.n}, {"k", s.k}, {"m", m}};

    // Every requested INT8 path on the same inputs, back to back, so a busy neighbour on this
    // shared host skews them alike; the first is the headline figure.
    std::vector<double> t_isa;
    const auto saved_isa = k::active_kernel_isa();
    for (auto isa : opt.isas) {
      k::set_kernel_isa(isa);
      t_isa.push_back(median_seconds(
          [&] {
            k::quantize_rows(x.data(), m, s.k, s.k, xq);
            k::gemm_int8(xq, w8, y.data(), s.n, pool);
          },
          budget));
      row["ours_int8_by_isa"][k::kernel_isa_name(isa)] =
          figures(t_isa.back(), m, s, static_cast<double>(w8.bytes()));
    }
    k::set_kernel_isa(saved_isa);
    const double t_ours = t_isa.front();
    row["ours_int8"] = figures(t_ours, m, s, static_cast<double>(w8.bytes()));
    row["ours_int8"]["isa"] = k::kernel_isa_name(opt.isas.front());
    for (size_t i = 0; i < opt.isas.size(); ++i)
      for (size_t j = 0; j < opt.isas.size(); ++j)
        if (opt.isas[i] == k::kernel_isa::avx_vnni && opt.isas[j] == k::kernel_isa::avx2)
          row["int8_avx_vnni_speedup_vs_avx2"] = round3(t_isa[j] / t_isa[i]);

    if (kb::onednn_int8_matmul::available()) {
      k::quantize_rows(x.data(), m, s.k, s.k, xq);
      kb::onednn_int8_matmul mm(w_plain.data(), s.n, s.k, m, xq.stride);
      std::vector<int32_t> acc(static_cast<size_t>(m * s.n));
      // The same per-token quantization and the same scale epilogue as ours, spread over the pool.
      const double t_all = median_seconds(
          [&] {
            k::quantize_rows(x.data(), m, s.k, s.k, xq);
            mm.run(xq.q.data(), acc.data());
            pool.parallel_for(m, [&](int64_t r) {
              for (int64_t c = 0; c < s.n; ++c)
                y[r * s.n + c] = static_cast<float>(acc[r * s.n + c]) * xq.scale[r] * w_scale[c];
            });
          },
          budget);
      const double t_mm = median_seconds([&] { mm.run(xq.q.data(), acc.data()); }, budget / 2);
      auto f = figures(t_all, m, s, static_cast<double>(s.n * s.k + s.n * 4));
      f["matmul_only_ms"] = t_mm * 1e3;
      f["impl"] = mm.implementation();
      row["onednn_int8"] = f;
      row["int8_speedup_vs_onednn"] = round3(t_all / t_ours);
      for (size_t i = 0; i < opt.isas.size(); ++i)
        row["ours_int8_by_isa"][k::kernel_isa_name(opt.isas[i])]["speedup_vs_onednn"] =
            round3(t_all / t_isa[i]);
    }

    if (opt.int8_only) {
      rows.push_back(row);
      log_row(s, m, opt, row);
      continue;
    }
    if (kb::openblas_available()) {
      const double t = median_seconds(
          [&] { kb::openblas_gemm(x.data(), m, wf.data(), s.n, s.k, y.data()); }, budget);
      row["openblas_fp32"] = figures(t, m, s, static_cast<double>(s.n * s.k * 4));
    }
    const double t32 =
        median_seconds([&] { k::gemm_fp32(x.data(), m, s.k, w32, y.data(), s.n, pool); }, budget);
    row["ours_fp32"] = figures(t32, m, s, static_cast<double>(w32.bytes()));
    if (row.contains("openblas_fp32"))
      row["fp32_speedup_vs_openblas"] =
          round3(row["openblas_fp32"]["ms"].get<double>() / (t32 * 1e3));
    rows.push_back(row);
    log_row(s, m, opt, row);
  }
  return rows;
}
} // namespace

int run_kernel_bench(int argc, char** argv) {
  options opt;
  try {
    opt = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench kernels: %s\n", e.what());
    return 2;
  }
  kb::onednn_int8_matmul::init(opt.threads, opt.onednn_isa);
  kb::openblas_init(opt.threads);
  k::thread_pool pool(opt.threads);

  if (opt.isas.empty()) {
    // The path the process picked first (the headline), then the other SIMD paths to compare.
    opt.isas.push_back(k::active_kernel_isa());
    for (auto isa : {k::kernel_isa::avx_vnni, k::kernel_isa::avx2})
      if (k::kernel_isa_supported(isa) && isa != opt.isas.front()) opt.isas.push_back(isa);
  }

  json machine;
  machine["threads"] = opt.threads;
  machine["kernel_isa"] = k::kernel_isa_name(k::active_kernel_isa());
  machine["int8_isas_timed"] = json::array();
  for (auto isa : opt.isas) machine["int8_isas_timed"].push_back(k::kernel_isa_name(isa));
  machine["onednn_isa"] = kb::onednn_int8_matmul::effective_isa();
  machine["openblas_core"] = kb::openblas_core();
  // Ceilings are measured before and after the kernels and the better figure kept: a busy
  // neighbour on this shared host lowers them, and a ceiling must not be underestimated.
  auto measure_ceilings = [&] {
    if (!k::kernel_isa_supported(k::kernel_isa::avx2)) {
      machine["read_bw_gbs"] = 1.0;
      machine["int8_sign_trick_peak_gops_per_core"] = 1.0;
      return;
    }
    auto keep_max = [&](const char* key, double v) {
      machine[key] = machine.contains(key) ? std::max(machine[key].get<double>(), v) : v;
    };
    const double bw1 = kb::read_bandwidth_gbs(1);
    keep_max("read_bw_gbs_1core", bw1);
    keep_max("read_bw_gbs", opt.threads == 1 ? bw1 : kb::read_bandwidth_gbs(opt.threads));
    keep_max("int8_sign_trick_peak_gops_per_core", kb::int8_sign_trick_peak_gops());
    keep_max("int8_maddubs_peak_gops_per_core", kb::int8_maddubs_peak_gops());
    if (k::kernel_isa_supported(k::kernel_isa::avx_vnni))
      keep_max("int8_vnni_sign_trick_peak_gops_per_core", kb::int8_vnni_sign_trick_peak_gops());
    keep_max("fp32_fma_peak_gflops_per_core", kb::fp32_fma_peak_gflops());
  };
  measure_ceilings();

  std::vector<int64_t> ms =
      opt.quick ? std::vector<int64_t>{1, 8, 32, 128} : std::vector<int64_t>{1, 8, 32, 128, 512};
  if (!opt.ms.empty()) ms = opt.ms;
  json results = json::array();
  for (const auto& s : all_shapes) {
    const bool wanted =
        !opt.shapes.empty()
            ? std::find(opt.shapes.begin(), opt.shapes.end(), s.name) != opt.shapes.end()
            : !opt.quick || std::any_of(std::begin(quick_shapes), std::end(quick_shapes),
                                        [&](const char* q) { return std::strcmp(q, s.name) == 0; });
    if (!wanted) continue;
    std::fprintf(stderr, "bench kernels: %s (%lld x %lld)\n", s.name, static_cast<long long>(s.n),
                 static_cast<long long>(s.k));
    for (auto& r : bench_shape(s, ms, opt, pool)) results.push_back(r);
  }

  measure_ceilings();
  // Against the ceilings: memory for the weight stream at small M, arithmetic at large M.
  const double bw = machine["read_bw_gbs"].get<double>();
  // The headline path's own instruction mix sets its arithmetic ceiling.
  const char* peak_key = opt.isas.front() == k::kernel_isa::avx_vnni
                             ? "int8_vnni_sign_trick_peak_gops_per_core"
                             : "int8_sign_trick_peak_gops_per_core";
  const double peak = machine[peak_key].get<double>() * opt.threads;
  for (auto& row : results) {
    row["int8_fraction_of_read_bw"] = round3(row["ours_int8"]["weight_gbs"].get<double>() / bw);
    row["int8_fraction_of_peak"] = round3(row["ours_int8"]["gops"].get<double>() / peak);
  }

  // Geometric means per M: the headline INT8 speed-up over oneDNN, the same for each timed
  // path, and AVX-VNNI over AVX2.
  json summary = json::object();
  auto geomean = [&](const std::string& out_key, int64_t m, auto&& value) {
    double log_sum = 0;
    int count = 0;
    for (auto& r : results)
      if (r["m"] == m)
        if (const double v = value(r); v > 0) {
          log_sum += std::log(v);
          ++count;
        }
    char key[32];
    std::snprintf(key, sizeof key, "m%lld", static_cast<long long>(m));
    if (count) summary[out_key][key] = round3(std::exp(log_sum / count));
  };
  for (int64_t m : ms) {
    geomean("int8_speedup_vs_onednn_geomean", m,
            [](const json& r) { return r.value("int8_speedup_vs_onednn", 0.0); });
    for (auto isa : opt.isas) {
      const std::string name = k::kernel_isa_name(isa);
      geomean("int8_" + name + "_speedup_vs_onednn_geomean", m, [&](const json& r) {
        return r["ours_int8_by_isa"][name].value("speedup_vs_onednn", 0.0);
      });
    }
    geomean("int8_avx_vnni_speedup_vs_avx2_geomean", m,
            [](const json& r) { return r.value("int8_avx_vnni_speedup_vs_avx2", 0.0); });
  }
  const json out{{"machine", machine}, {"summary", summary}, {"results", results}};
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}

} // namespace supernode::apps
