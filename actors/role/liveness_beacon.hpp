#pragma once
// The sign of life a supervisor's liveness probe watches (services/cluster/supervisor.hpp):
// every role actor's tick touches the file SUPERNODE_LIVENESS_FILE names, so the file's age is
// how long the process's actors have not run — a SIGSTOPped or deadlocked process stops
// touching it, a busy one (its compute on worker threads) does not. No file named: nothing.

namespace supernode::actors {

// Touches the file (its mtime := now), creating it 0600 if absent; cheap, safe from any thread.
void liveness_beat();

} // namespace supernode::actors
