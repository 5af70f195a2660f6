#include "services/scheduler/pd_mapping.hpp"

#include <stdexcept>
#include <string>

namespace supernode::services {

int64_t prefill_tp_rank_for(const pd_shape& s, int64_t dp_rank, int64_t tp_rank) {
  if (s.prefill_tp_size <= 0 || s.decode_tp_size <= 0 || s.decode_dp_size <= 0)
    throw std::invalid_argument("P-D mapping: TP and DP sizes must be positive");
  if (s.prefill_tp_size % s.decode_tp_size != 0)
    throw std::invalid_argument(
        "P-D mapping: prefill_tp_size " + std::to_string(s.prefill_tp_size) +
        " is not a multiple of decode_tp_size " + std::to_string(s.decode_tp_size));
  if (dp_rank < 0 || dp_rank >= s.decode_dp_size)
    throw std::invalid_argument("P-D mapping: decode DP rank " + std::to_string(dp_rank) +
                                " outside [0, " + std::to_string(s.decode_dp_size) + ")");
  if (tp_rank < 0 || tp_rank >= s.decode_tp_size)
    throw std::invalid_argument("P-D mapping: decode TP rank " + std::to_string(tp_rank) +
                                " outside [0, " + std::to_string(s.decode_tp_size) + ")");
  const int64_t ratio = s.prefill_tp_size / s.decode_tp_size;
  // Rounded up, so fewer decode DP ranks than groups (or a remainder) still map inside the
  // prefill group: the paper's formula assumes decode_dp_size is a multiple of the ratio.
  const int64_t group_size = (s.decode_dp_size + ratio - 1) / ratio;
  const int64_t group_id = dp_rank / group_size;
  return group_id * s.decode_tp_size + tp_rank;
}

} // namespace supernode::services
