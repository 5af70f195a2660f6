#pragma once
// Which prefill TP rank sends a decode rank its KV (CloudMatrix-Infer §4.3.3). MLA keeps one
// latent head, so every rank of a prefill TP group holds the whole KV and any of them can be
// the source; the mapping spreads decode DP ranks over the prefill ranks so no link is hot:
//   ratio      = prefill_tp_size / decode_tp_size
//   group_size = decode_dp_size / ratio            (rounded up; at least 1)
//   group_id   = decode_dp_rank / group_size
//   prefill_tp_rank = group_id * decode_tp_size + decode_tp_rank

#include <cstdint>

namespace supernode::services {

struct pd_shape {
  int64_t prefill_tp_size = 1;
  int64_t decode_tp_size = 1;
  int64_t decode_dp_size = 1;
};

// Throws std::invalid_argument naming the bad value: sizes must be positive, prefill_tp_size a
// multiple of decode_tp_size, and the ranks inside their sizes.
int64_t prefill_tp_rank_for(const pd_shape& shape, int64_t decode_dp_rank, int64_t decode_tp_rank);

} // namespace supernode::services
