#include "apps/bench/kernel_bench.hpp"

#include "apps/bench/expert_stream_bench.hpp"
#include "apps/bench/kernel_bench_baselines.hpp"
#include "apps/bench/kernel_bench_common.hpp"
#include "apps/bench/kernel_bench_machine.hpp"
#include "apps/bench/kernel_bench_onednn.hpp"
#include "apps/bench/rms_norm_bench.hpp"
#include "kernels/gemm_fp32.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/kernel_isa.hpp"
#include "kernels/quantize.hpp"
#include "kernels/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace supernode::apps {

namespace {
namespace kb = kernel_bench;
namespace k = kernels;
using json = nlohmann::json;
using kb::round3;
using kb::shape;

constexpr const char* quick_shapes[] = {
    "q_a", "dense_gate_up", "dense_down", "expert_gate_up", "expert_down", "lm_head"};

struct options {
  int threads = 1;
  bool quick = false;
  bool int8_only = false;
  std::vector<k::kernel_isa> isas;   // INT8 paths to time; empty: every supported SIMD path
  std::vector<std::string> shapes;   // empty: the default set
  std::vector<int64_t> ms;           // empty: the default set
  std::string onednn_worker;         // non-empty: run as the oneDNN worker with this cap
  std::string onednn_isa = "native"; // the headline baseline's cap (--onednn-isa)
  bool expert_stream = false;        // only the expert-stream comparison (--expert-stream)
  bool rms_norm = false;             // only RMSNorm on every path (--rms-norm)
  int rounds = 9;                    // alternations of --expert-stream or --rms-norm (--rounds)
  int pairs = 1; // > 1: each row also alternates ours, oneDNN native and the peak probe (--pairs)
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
    } else if (a == "--isa" && i + 1 < argc) {
      for (auto& v : split(argv[++i])) {
        k::kernel_isa isa;
        if (!k::parse_kernel_isa(v.c_str(), isa))
          throw std::invalid_argument("--isa takes portable, avx2, avx_vnni, avx512_vnni or amx, "
                                      "not '" +
                                      v + "'");
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
    } else if (a == "--onednn-isa" && i + 1 < argc) {
      o.onednn_isa = argv[++i];
      static const std::set<std::string> caps = {"native", "avx2", "avx2_vnni", "avx512_core_vnni",
                                                 "avx512_core_amx"};
      if (!caps.count(o.onednn_isa))
        throw std::invalid_argument("--onednn-isa takes native, avx2, avx2_vnni, "
                                    "avx512_core_vnni or avx512_core_amx, not '" +
                                    o.onednn_isa + "'");
    } else if (a == "--expert-stream") {
      o.expert_stream = true;
    } else if (a == "--rms-norm") {
      o.rms_norm = true;
    } else if (a == "--rounds" && i + 1 < argc) {
      o.rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--pairs" && i + 1 < argc) {
      o.pairs = std::clamp(std::atoi(argv[++i]), 1, 99);
    } else if (a == "--onednn-worker" && i + 1 < argc) {
      o.onednn_worker = argv[++i];
    } else {
      throw std::invalid_argument(
          "unknown option '" + a +
          "' (expected --threads N, --quick, --isa avx512_vnni,avx2, "
          "--int8-only, --shapes a,b, --m 1,8, --onednn-isa native, --pairs N, "
          "--expert-stream [--rounds N], --rms-norm [--rounds N])");
    }
  }
  return o;
}

// oneDNN native and oneDNN capped at each timed path's ISA, each in its own worker process.
struct onednn_baselines {
  std::unique_ptr<kb::onednn_worker> native;
  std::map<k::kernel_isa, std::unique_ptr<kb::onednn_worker>> capped;

  onednn_baselines(const options& opt) {
    if (!kb::onednn_int8_matmul::available()) return;
    native = std::make_unique<kb::onednn_worker>(opt.onednn_isa, opt.threads, opt.quick);
    for (auto isa : opt.isas)
      if (const auto cap = kb::onednn_cap_for(isa); !cap.empty())
        capped[isa] = std::make_unique<kb::onednn_worker>(cap, opt.threads, opt.quick);
  }
};

// The headline path timed opt.pairs times, each round beside oneDNN native (where it runs) and
// the exact-step peak probe of the path's ISA: the rounds' ratios, their median and spread. A
// ratio of two runs taken seconds apart moves with this shared host's phases (by up to a fifth
// at one row between two runs, and the probe from 0.7 to 0.95 of a kernel's rate); each
// round's figures share their phase. (The headline figures above are no round of these: the
// other paths' timings stand between ours and oneDNN's.)
template<class Ours>
json paired_rounds(const options& opt, onednn_baselines& onednn, const shape& s, int64_t m,
                   const Ours& ours, double budget) {
  const auto saved_isa = k::active_kernel_isa();
  const auto isa = opt.isas.front();
  k::set_kernel_isa(isa);
  const double ops = kb::gemm_ops(m, s);
  std::vector<double> speedups, fractions;
  for (int r = 0; r < opt.pairs; ++r) {
    const double t_ours = kb::median_seconds(ours, budget);
    if (const double peak = kb::exact_int8_peak_gops(isa, opt.threads); peak > 0.0)
      fractions.push_back(round3(ops / t_ours / 1e9 / peak));
    const json native = onednn.native ? onednn.native->time(s, m) : json();
    if (!native.is_null()) speedups.push_back(round3(native["ms"].get<double>() / 1e3 / t_ours));
  }
  k::set_kernel_isa(saved_isa);
  json out = json::object();
  auto add = [&out](const char* key, const std::vector<double>& values) {
    if (values.empty()) return;
    out[key] = kb::spread(values);
    out[key]["ratios"] = values;
  };
  add("int8_speedup_vs_onednn_paired", speedups);
  add("fraction_of_exact_peak_paired", fractions);
  return out;
}

void log_row(const shape& s, int64_t m, const options& opt, const json& row) {
  for (auto isa : opt.isas) {
    const json& f = row["ours_int8_by_isa"][k::kernel_isa_name(isa)];
    std::fprintf(stderr,
                 "  %-15s m=%-4lld %-11s %8.3f ms (%5.1f GB/s, %5.1f GOPS), x%.2f vs oneDNN "
                 "native, x%.2f vs oneDNN %s\n",
                 s.name, static_cast<long long>(m), k::kernel_isa_name(isa), f["ms"].get<double>(),
                 f["weight_gbs"].get<double>(), f["gops"].get<double>(),
                 f.value("speedup_vs_onednn", 0.0), f.value("speedup_vs_onednn_same_isa", 0.0),
                 kb::onednn_cap_for(isa).c_str());
  }
}

// Every implementation on one weight shape for each M: our INT8 paths back to back, then oneDNN
// native and capped, so a busy neighbour on this shared host skews them alike.
json bench_shape(const shape& s, const std::vector<int64_t>& ms, const options& opt,
                 onednn_baselines& onednn, k::thread_pool& pool) {
  const auto wf = kb::shape_weights(s);
  const auto w8 = k::int8_weight::quantize(wf.data(), s.n, s.k);
  const double budget = kb::timing_budget(opt.quick);
  {
    // A weight just written is slow to stream for a while on this guest (lm_head at M = 1 ran
    // 10-60 % slower on whichever path was timed first): one untimed budget of M = 1 passes
    // first, so that the paths timed in a row compare alike.
    const auto x1 = kb::shape_activations(s, 1);
    std::vector<float> y1(static_cast<size_t>(s.n));
    k::quantized_rows xq1;
    k::quantize_rows(x1.data(), 1, s.k, s.k, xq1);
    kb::median_seconds([&] { k::gemm_int8(xq1, w8, y1.data(), s.n, pool); }, budget);
  }
  json rows = json::array();
  for (int64_t m : ms) {
    const auto x = kb::shape_activations(s, m);
    std::vector<float> y(static_cast<size_t>(m * s.n));
    k::quantized_rows xq;
    json row{{"shape", s.name}, {"n", s.n}, {"k", s.k}, {"m", m}};

    std::map<k::kernel_isa, double> t_isa;
    const auto saved_isa = k::active_kernel_isa();
    const auto ours = [&] {
      k::quantize_rows(x.data(), m, s.k, s.k, xq);
      k::gemm_int8(xq, w8, y.data(), s.n, pool);
    };
    for (auto isa : opt.isas) {
      k::set_kernel_isa(isa);
      t_isa[isa] = kb::median_seconds(ours, budget);
      row["ours_int8_by_isa"][k::kernel_isa_name(isa)] =
          kb::figures(t_isa[isa], m, s, static_cast<double>(w8.bytes()));
    }
    k::set_kernel_isa(saved_isa);
    const auto headline = opt.isas.front();
    row["ours_int8"] = kb::figures(t_isa[headline], m, s, static_cast<double>(w8.bytes()));
    row["ours_int8"]["isa"] = k::kernel_isa_name(headline);

    if (onednn.native) {
      const json native = onednn.native->time(s, m);
      if (!native.is_null()) {
        row["onednn_int8"] = native;
        const double t = native["ms"].get<double>() / 1e3;
        row["int8_speedup_vs_onednn"] = round3(t / t_isa[headline]);
        for (auto isa : opt.isas)
          row["ours_int8_by_isa"][k::kernel_isa_name(isa)]["speedup_vs_onednn"] =
              round3(t / t_isa[isa]);
      }
      for (auto& [isa, worker] : onednn.capped) {
        const json capped = worker->time(s, m);
        if (capped.is_null()) continue;
        row["onednn_int8_capped"][worker->cap()] = capped;
        row["ours_int8_by_isa"][k::kernel_isa_name(isa)]["speedup_vs_onednn_same_isa"] =
            round3(capped["ms"].get<double>() / 1e3 / t_isa[isa]);
      }
    }

    if (opt.pairs > 1) row.update(paired_rounds(opt, onednn, s, m, ours, budget));

    if (!opt.int8_only) {
      const auto w32 = k::fp32_weight::pack(wf.data(), s.n, s.k);
      if (kb::openblas_available()) {
        const double t = kb::median_seconds(
            [&] { kb::openblas_gemm(x.data(), m, wf.data(), s.n, s.k, y.data()); }, budget);
        row["openblas_fp32"] = kb::figures(t, m, s, static_cast<double>(s.n * s.k * 4));
      }
      const double t32 = kb::median_seconds(
          [&] { k::gemm_fp32(x.data(), m, s.k, w32, y.data(), s.n, pool); }, budget);
      row["ours_fp32"] = kb::figures(t32, m, s, static_cast<double>(w32.bytes()));
      if (row.contains("openblas_fp32"))
        row["fp32_speedup_vs_openblas"] =
            round3(row["openblas_fp32"]["ms"].get<double>() / (t32 * 1e3));
    }
    rows.push_back(row);
    log_row(s, m, opt, row);
  }
  return rows;
}

// Ceilings are measured before and after the kernels and the better figure kept: a busy
// neighbour on this shared host lowers them, and a ceiling must not be underestimated.
void measure_ceilings(const options& opt, json& machine) {
  if (!k::kernel_isa_supported(k::kernel_isa::avx2)) return;
  auto keep_max = [](json& slot, double v) {
    slot = slot.is_number() ? std::max(slot.get<double>(), v) : v;
  };
  const double bw1 = kb::read_bandwidth_gbs(1);
  keep_max(machine["read_bw_gbs_1core"], bw1);
  keep_max(machine["read_bw_gbs"], opt.threads == 1 ? bw1 : kb::read_bandwidth_gbs(opt.threads));
  // The exact step of every timed path's inner loop, and the inexact vpmaddubsw step that
  // saturating kernels (oneDNN's AVX2 path) can reach.
  // With several threads, also what they reach running the step at once: the ceiling the
  // fractions below use (a core's rate times the threads overstates it for SMT siblings).
  for (auto isa : opt.isas)
    if (isa != k::kernel_isa::portable) {
      keep_max(machine["int8_exact_peak_gops_per_core"][k::kernel_isa_name(isa)],
               kb::exact_int8_peak_gops(isa));
      if (opt.threads > 1)
        keep_max(machine["int8_exact_peak_gops_all_threads"][k::kernel_isa_name(isa)],
                 kb::exact_int8_peak_gops(isa, opt.threads));
    }
  keep_max(machine["int8_maddubs_peak_gops_per_core"], kb::int8_maddubs_peak_gops());
  keep_max(machine["fp32_fma_peak_gflops_per_core"], kb::fp32_fma_peak_gflops());
}

// Each row against the ceilings: memory for the weight stream at small M, each path's own exact
// arithmetic peak at large M.
void add_fractions(const options& opt, const json& machine, json& results) {
  if (!machine.contains("read_bw_gbs")) return;
  const double bw = machine["read_bw_gbs"].get<double>();
  for (auto& row : results) {
    row["int8_fraction_of_read_bw"] = round3(row["ours_int8"]["weight_gbs"].get<double>() / bw);
    for (auto isa : opt.isas) {
      const char* name = k::kernel_isa_name(isa);
      if (isa == k::kernel_isa::portable) continue;
      const double peak = opt.threads > 1
                              ? machine["int8_exact_peak_gops_all_threads"][name].get<double>()
                              : machine["int8_exact_peak_gops_per_core"][name].get<double>();
      auto& f = row["ours_int8_by_isa"][name];
      f["fraction_of_exact_peak"] = round3(f["gops"].get<double>() / peak);
    }
  }
}

// Geometric means per M of each path's speed-up over oneDNN native and over oneDNN capped at
// its ISA.
json summarize(const options& opt, const std::vector<int64_t>& ms, const json& results) {
  json summary = json::object();
  // summary[key]["m<M>"]: the geometric mean over the rows of M of value_of(row), where positive.
  const auto geomean_per_m = [&](const std::string& key, const auto& value_of) {
    for (int64_t m : ms) {
      double log_sum = 0;
      int count = 0;
      for (auto& r : results)
        if (r["m"] == m)
          if (const double v = value_of(r); v > 0) {
            log_sum += std::log(v);
            ++count;
          }
      char m_key[32];
      std::snprintf(m_key, sizeof m_key, "m%lld", static_cast<long long>(m));
      if (count) summary[key][m_key] = round3(std::exp(log_sum / count));
    }
  };
  for (auto isa : opt.isas) {
    const std::string name = k::kernel_isa_name(isa);
    for (const char* versus : {"speedup_vs_onednn", "speedup_vs_onednn_same_isa"}) {
      // Built without operator+ on a literal: GCC 12 raises a false -Wrestrict on it.
      std::string key = "int8_";
      key.append(name).append("_").append(versus).append("_geomean");
      geomean_per_m(key,
                    [&](const json& r) { return r["ours_int8_by_isa"][name].value(versus, 0.0); });
    }
  }
  // With --pairs: the rows' paired medians (the headline path against oneDNN native and
  // against the peak probe).
  for (const std::string paired :
       {"int8_speedup_vs_onednn_paired", "fraction_of_exact_peak_paired"})
    geomean_per_m(paired + "_median_geomean", [&paired](const json& r) {
      const auto it = r.find(paired);
      return it != r.end() && it->is_object() ? it->value("median", 0.0) : 0.0;
    });
  return summary;
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
  if (!opt.onednn_worker.empty())
    return kb::run_onednn_worker(opt.onednn_worker, opt.threads, opt.quick);

  if (opt.rms_norm) {
    std::printf("%s\n", rms_norm_report(opt.rounds).dump(1).c_str());
    return 0;
  }
  if (opt.expert_stream) {
    k::thread_pool::configure_shared(opt.threads);
    std::printf("%s\n", expert_stream_report(k::thread_pool::shared(), opt.rounds).dump(1).c_str());
    return 0;
  }
  if (opt.isas.empty()) {
    // The path the process picked (the headline), then every other SIMD path the CPU has.
    opt.isas.push_back(k::active_kernel_isa());
    for (auto it = std::rbegin(k::all_kernel_isas); it != std::rend(k::all_kernel_isas); ++it)
      if (*it != k::kernel_isa::portable && k::kernel_isa_supported(*it) && *it != opt.isas.front())
        opt.isas.push_back(*it);
  }
  // The workers fork before this process starts any thread of its own.
  onednn_baselines onednn(opt);
  kb::openblas_init(opt.threads);
  // One pool of --threads for everything timed, the per-token quantization included: a
  // process-wide pool of the machine's size would run it on a second thread beside the GEMM.
  k::thread_pool::configure_shared(opt.threads);
  k::thread_pool& pool = k::thread_pool::shared();

  json machine;
  machine["threads"] = opt.threads;
  machine["kernel_isa"] = k::kernel_isa_name(k::active_kernel_isa());
  machine["int8_isas_timed"] = json::array();
  for (auto isa : opt.isas) machine["int8_isas_timed"].push_back(k::kernel_isa_name(isa));
  machine["openblas_core"] = kb::openblas_core();
  measure_ceilings(opt, machine);

  std::vector<int64_t> ms =
      opt.quick ? std::vector<int64_t>{1, 8, 32, 128} : std::vector<int64_t>{1, 8, 32, 128, 512};
  if (!opt.ms.empty()) ms = opt.ms;
  json results = json::array();
  for (const auto& s : kb::all_shapes) {
    const bool wanted =
        !opt.shapes.empty()
            ? std::find(opt.shapes.begin(), opt.shapes.end(), s.name) != opt.shapes.end()
            : !opt.quick || std::any_of(std::begin(quick_shapes), std::end(quick_shapes),
                                        [&](const char* q) { return std::strcmp(q, s.name) == 0; });
    if (!wanted) continue;
    std::fprintf(stderr, "bench kernels: %s (%lld x %lld)\n", s.name, static_cast<long long>(s.n),
                 static_cast<long long>(s.k));
    for (auto& r : bench_shape(s, ms, opt, onednn, pool)) results.push_back(r);
  }
  measure_ceilings(opt, machine);
  add_fractions(opt, machine, results);
  for (auto& r : results)
    if (r.contains("onednn_int8")) machine["onednn_native_isa"] = r["onednn_int8"]["isa"];

  const json out{
      {"machine", machine}, {"summary", summarize(opt, ms, results)}, {"results", results}};
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}

} // namespace supernode::apps
