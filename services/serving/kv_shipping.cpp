#include "services/serving/kv_shipping.hpp"

#include "services/serving/delivery.hpp"
#include "services/serving/kv_checksum.hpp"

#include <algorithm>

namespace supernode::services {

transport::send_status ship_kv(transport::endpoint& out, const transport::peer_id& to,
                               const kv_shipment& what, std::span<const int32_t> blocks,
                               const model::kv_block_pool& pool) {
  const auto& layout = pool.layout();
  const auto total = static_cast<int64_t>(blocks.size());
  const int64_t per_run =
      std::max<int64_t>(1, static_cast<int64_t>(max_kv_run_bytes / layout.block_bytes()));
  for (int64_t first = 0; first < total; first += per_run) {
    const int64_t count = std::min(per_run, total - first);
    std::vector<char> bytes(static_cast<size_t>(count) * layout.block_bytes());
    const auto into = std::as_writable_bytes(std::span(bytes));
    for (int64_t i = 0; i < count; ++i)
      pool.export_block_bytes(blocks[first + i],
                              into.subspan(i * layout.block_bytes(), layout.block_bytes()));
    protocol::kv_transfer kv;
    kv.key = what.key;
    kv.first_token = what.first_token;
    kv.prompt_tokens = what.prompt_tokens;
    kv.generated_tokens = what.generated_tokens;
    kv.block_floats = layout.block_floats();
    kv.first_block = first;
    kv.block_count = count;
    kv.total_blocks = total;
    if (first == 0 && what.mtp && !what.mtp->broken) {
      kv.mtp_first_position = what.mtp->first_position;
      kv.mtp_following = what.mtp->following;
      kv.mtp_hidden = what.mtp->hidden;
    }
    kv.data = transport::shared_bytes(std::move(bytes));
    kv.checksum = kv_transfer_checksum(kv);
    const auto status = send_with_backoff(out, "bulk", to, transport::make_envelope(std::move(kv)));
    if (status != transport::send_status::ok) return status;
  }
  return transport::send_status::ok;
}

} // namespace supernode::services
