#pragma once

namespace supernode::apps {
class cli_args;
// `supernode bench resume`: how long a request resumed on a new decode instance takes from its
// prompt's KV arrival to its first new token, by generated length, when the decode instance
// recomputes the generated span (one multi-position decode step) and when it loads the blocks
// its first instance mirrored ([ems] store_decode_kv = "incremental") and feeds only the rest.
// Prints a table. The pool is in memory: the loaded column excludes the pool's transfer time
// (its bytes are printed, to set against the read path's bandwidth).
int run_resume_bench(cli_args& args);
} // namespace supernode::apps
