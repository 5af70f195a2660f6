#include "apps/bench/kernel_bench_baselines.hpp"

#include <dlfcn.h>
#include <stdexcept>

#if SUPERNODE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#if SUPERNODE_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace supernode::apps::kernel_bench {

#if SUPERNODE_HAVE_DNNL
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct onednn_int8_matmul::state {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory weights;
  dnnl::memory::desc src_md, dst_md;
};

bool onednn_int8_matmul::available() {
  return true;
}

void onednn_int8_matmul::init(int threads, const std::string& max_isa) {
  // The Debian build threads with OpenMP; libgomp is already loaded through libdnnl.
  using set_fn = void (*)(int);
  if (auto set = reinterpret_cast<set_fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(threads);
  if (max_isa == "avx2") dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
  if (max_isa == "avx2_vnni") dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2_vnni);
  if (max_isa == "avx512_core_vnni") dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_vnni);
  if (max_isa == "avx512_core_amx") dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_amx);
}

std::string onednn_int8_matmul::effective_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
  case dnnl::cpu_isa::avx2:
    return "avx2";
  case dnnl::cpu_isa::avx2_vnni:
    return "avx2_vnni";
  case dnnl::cpu_isa::avx512_core:
    return "avx512_core";
  case dnnl::cpu_isa::avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl::cpu_isa::avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl::cpu_isa::avx512_core_amx:
    return "avx512_core_amx";
  default:
    return "other";
  }
}

onednn_int8_matmul::onednn_int8_matmul(const int8_t* w, int64_t n, int64_t k, int64_t m,
                                       int64_t ldx)
    : s_(std::make_unique<state>()) {
  using dims = dnnl::memory::dims;
  s_->src_md = dnnl::memory::desc(dims{m, k}, dt::s8, dims{ldx, 1});
  s_->dst_md = dnnl::memory::desc(dims{m, n}, dt::s32, tag::ab);
  const dnnl::memory::desc any_w(dims{k, n}, dt::s8, tag::any);
  s_->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(s_->src_md, any_w, s_->dst_md), s_->eng);
  s_->prim = dnnl::matmul(s_->pd);
  // W[n][k] row-major is the k x n matrix in column-major ("ba") order.
  dnnl::memory user_w({dims{k, n}, dt::s8, tag::ba}, s_->eng, const_cast<int8_t*>(w));
  s_->weights = dnnl::memory(s_->pd.weights_desc(), s_->eng);
  dnnl::reorder(user_w, s_->weights).execute(s_->strm, user_w, s_->weights);
  s_->strm.wait();
}

onednn_int8_matmul::~onednn_int8_matmul() = default;

void onednn_int8_matmul::run(const int8_t* x, int32_t* acc) {
  dnnl::memory src(s_->src_md, s_->eng, const_cast<int8_t*>(x));
  dnnl::memory dst(s_->dst_md, s_->eng, acc);
  s_->prim.execute(s_->strm,
                   {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, s_->weights}, {DNNL_ARG_DST, dst}});
  s_->strm.wait();
}

std::string onednn_int8_matmul::implementation() const {
  return s_->pd.impl_info_str();
}
#else
struct onednn_int8_matmul::state {};
bool onednn_int8_matmul::available() {
  return false;
}
void onednn_int8_matmul::init(int, const std::string&) {}
std::string onednn_int8_matmul::effective_isa() {
  return "none";
}
onednn_int8_matmul::onednn_int8_matmul(const int8_t*, int64_t, int64_t, int64_t, int64_t) {
  throw std::runtime_error("built without oneDNN");
}
onednn_int8_matmul::~onednn_int8_matmul() = default;
void onednn_int8_matmul::run(const int8_t*, int32_t*) {}
std::string onednn_int8_matmul::implementation() const {
  return "none";
}
#endif

#if SUPERNODE_HAVE_OPENBLAS
bool openblas_available() {
  return true;
}
void openblas_init(int threads) {
  openblas_set_num_threads(threads);
}
std::string openblas_core() {
  return openblas_get_corename();
}
void openblas_gemm(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y) {
  const auto N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  if (m == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, w, K, x, 1, 0.0f, y, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), N, K, 1.0f, x, K,
                w, K, 0.0f, y, N);
}
#else
bool openblas_available() {
  return false;
}
void openblas_init(int) {}
std::string openblas_core() {
  return "none";
}
void openblas_gemm(const float*, int64_t, const float*, int64_t, int64_t, float*) {}
#endif

} // namespace supernode::apps::kernel_bench
