#pragma once
// Storage faults of a fault-injection run (the plan file's [[storage_fault]] tables, see
// fault_injection.hpp): disk_full makes the MP server's SSD-tier writes fail with ENOSPC during
// the window; slow_store adds delay_ms to every object-store read. Inert unless the environment
// names a plan with such faults.

#include "transport/fault_injection.hpp"

#include <mutex>
#include <optional>
#include <string>

namespace supernode::transport {

class storage_fault_table {
public:
  storage_fault_table(plane_fault_plan plan, std::string epoch_file,
                      fault_injector::clock_function now = {});

  // The fault of `kind` whose window is open now in process slot `slot` (empty: unknown, so
  // only faults without a process apply), if any.
  std::optional<storage_fault> active(storage_fault_kind kind, const std::string& slot);

private:
  plane_fault_plan plan_;
  fault_injector::clock_function now_;
  std::mutex mutex_;
  fault_epoch epoch_; // under mutex_
};

// The process-wide table's answer for this process (process_fault_slot()); nothing outside a
// chaos run. Logs at info the first time each fault acts.
std::optional<storage_fault> active_storage_fault(storage_fault_kind kind);

} // namespace supernode::transport
