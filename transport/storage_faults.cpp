#include "transport/storage_faults.hpp"

#include <chrono>
#include <memory>
#include <set>

namespace supernode::transport {

storage_fault_table::storage_fault_table(plane_fault_plan plan, std::string epoch_file,
                                         fault_injector::clock_function now)
    : plan_(std::move(plan)),
      now_(now ? std::move(now)
               : [] {
                   return std::chrono::duration<double>(
                              std::chrono::system_clock::now().time_since_epoch())
                       .count();
                 }),
      epoch_(plan_.epoch_s, std::move(epoch_file)) {}

std::optional<storage_fault> storage_fault_table::active(storage_fault_kind kind,
                                                         const std::string& slot) {
  const double now = now_();
  std::lock_guard lock(mutex_);
  const auto since = epoch_.since(now);
  if (!since) return std::nullopt;
  for (const auto& f : plan_.storage)
    if (f.kind == kind && (f.process.empty() || f.process == slot) && *since >= f.at_s &&
        *since < f.at_s + f.duration_s)
      return f;
  return std::nullopt;
}

std::optional<storage_fault> active_storage_fault(storage_fault_kind kind) {
  static const std::unique_ptr<storage_fault_table> table = []() {
    const plane_fault_plan* plan = process_fault_plan();
    return plan && !plan->storage.empty()
               ? std::make_unique<storage_fault_table>(*plan, process_fault_epoch_file())
               : nullptr;
  }();
  if (!table) return std::nullopt;
  auto fault = table->active(kind, process_fault_slot());
  if (fault) {
    static std::mutex mutex;
    static std::set<std::pair<int, double>> announced;
    std::lock_guard lock(mutex);
    if (announced.insert({static_cast<int>(fault->kind), fault->at_s}).second)
      log::logger(process_fault_slot().empty() ? "-" : process_fault_slot())
          .info("fault injection: {} for {:g} s starts (faults_injected)", to_string(fault->kind),
                fault->duration_s);
  }
  return fault;
}

} // namespace supernode::transport
