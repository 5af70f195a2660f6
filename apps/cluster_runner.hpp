#pragma once
// `supernode cluster up|status|down`: one OS process per process instance of a config on this
// host, started from this binary as `supernode role NAME --id I`, each with its log and pid
// file in the config's run folder (run_dir/logs, run_dir/pids), so a later command finds them.

#include "apps/serving_setup.hpp"

#include <filesystem>

namespace supernode::apps {

// Starts every process and waits until each prints "ready"; on any failure stops those started
// and returns 1 with the failing process's log tail on stderr.
int cluster_up(const serving_setup& setup, const std::filesystem::path& config_file);
// One line per process: running (pid) or not; returns 0 when all run.
int cluster_status(const serving_setup& setup);
// SIGTERM to every process, SIGKILL to any still alive after `grace`; returns 0.
int cluster_down(const serving_setup& setup, std::chrono::seconds grace = std::chrono::seconds(15));

} // namespace supernode::apps
