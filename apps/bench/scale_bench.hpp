#pragma once

namespace supernode::apps {
class cli_args;
// `supernode bench scale`: a rate schedule run with the planner on and with fixed smallest
// and largest counts; JSON and a timeline SVG (scale_bench_plot.hpp) of what each run did.
int run_scale_bench(cli_args& args);
} // namespace supernode::apps
