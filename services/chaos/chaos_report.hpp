#pragma once
// What a fault-injection run (`supernode chaos`) found: every request's tokens against the
// reference engine's, and latency before, during and after the faults. Times are seconds since
// the load started (request_outcome's clock).
//
// Definitions:
//   succeeded   requests that ended with [DONE]; failed = requests - succeeded.
//   mismatched  succeeded requests whose token ids differ from the reference's (a request whose
//               stream carried no token ids counts as mismatched: nothing proves it right).
//   duplicated_tokens  summed over every request, succeeded or not: tokens the client received
//               twice. The received ids are walked against the reference's: a token equal to the
//               next reference token advances both; where they differ, a run of received tokens
//               equal to a span ref[k..j) that ends at the reference position j reached so far
//               (the longest such; at the end of the stream, a prefix of it) is a replay — a
//               resumed request streaming again what the client already has — and its length
//               counts. Tokens after the whole reference was received count too (the stream ran
//               past max_tokens). Any other difference is a divergence: the walk stops there, and
//               the request is a mismatch, not a duplicate.
//   phases      a request is "before" when sent before the first fault fires, "after" when sent
//               once every fault has ended (its window closed and, when known, its process
//               recovered), "during" otherwise; TTFT and TPOT as bench serve defines them, over
//               the succeeded requests of each phase.

#include "services/loadgen/prometheus_text.hpp"
#include "services/loadgen/report.hpp"
#include "services/loadgen/request_outcome.hpp"

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::chaos {

struct fault_record {
  std::string kind;
  std::string target; // instance or process slot; "*" for a plane fault in every process
  double at_s = 0;
  double duration_s = 0;
  std::optional<double> detected_s;  // when the system noticed (see cmd_chaos)
  std::optional<double> recovered_s; // when the target served again
  std::string note;                  // what happened when it did not go as planned
  double end_s() const;              // at_s + duration_s, or recovered_s when later
};

struct phase_latency {
  int64_t requests = 0; // succeeded requests in the phase
  loadgen::latency_summary ttft_ms, tpot_ms;
};

// Where a succeeded request's tokens left the reference's, for reading a failed run.
struct token_mismatch {
  size_t request = 0;    // in workload order
  size_t first_diff = 0; // index of the first token that differs (or where one stream ended)
  size_t received = 0, expected = 0;
};

// What the gateway's /metrics said about resumed requests at the end of the run: how many were
// placed again, and the time from losing an instance to the stream going on (its histogram:
// the mean, and the bucket bound under which 99 % fell).
struct resume_stats {
  double resumed = 0;   // supernode_requests_resumed_total
  double recovered = 0; // observations of supernode_request_recovery_seconds
  double mean_s = 0;
  std::optional<double> p99_bound_s;
};
resume_stats resume_stats_of(const loadgen::metrics_snapshot& gateway_metrics);

struct chaos_report {
  int64_t requests = 0, succeeded = 0, failed = 0, mismatched = 0, duplicated_tokens = 0;
  int64_t retried = 0; // requests resubmitted after a connection error (bench serve --retry)
  std::vector<fault_record> faults;
  phase_latency before, during, after;
  std::vector<loadgen::failure_count> failures; // the first distinct reasons
  std::vector<token_mismatch> mismatches;       // the first few
  resume_stats resumes;
  // True when nothing was lost, wrong or repeated: the run's exit status.
  bool clean() const { return failed == 0 && mismatched == 0 && duplicated_tokens == 0; }
};

// The received tokens that repeat, as the header defines it.
int64_t duplicated_tokens(const std::vector<int32_t>& received,
                          const std::vector<int32_t>& reference);

// `reference[i]` is request i's reference tokens (outcomes in workload order).
chaos_report make_chaos_report(const std::vector<loadgen::request_outcome>& outcomes,
                               const std::vector<std::vector<int32_t>>& reference,
                               std::vector<fault_record> faults);

// Fields in reading order: requests, succeeded, failed, mismatched, duplicated_tokens, retried,
// faults[], ttft_ms and tpot_ms as {before, during, after} of {requests, p50, p99}, failures,
// mismatches.
nlohmann::ordered_json to_json(const chaos_report& r);
// A few lines for a terminal.
std::string to_text(const chaos_report& r);

} // namespace supernode::services::chaos
