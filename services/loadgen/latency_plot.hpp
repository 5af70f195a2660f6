#pragma once
// A self-contained SVG of the latency distributions: one empirical-CDF panel each for TTFT,
// TPOT, ITL and E2E with p50/p90/p99 marked. Written by hand so the benchmark needs no plotting
// library and the file opens in any browser.

#include "services/loadgen/report.hpp"

#include <string>

namespace supernode::services::loadgen {

// `title` heads the figure; `subtitle` (the run parameters, lines separated by '\n') goes
// below it.
std::string render_latency_svg(const latency_samples& samples, const std::string& title,
                               const std::string& subtitle);

// Text made safe for SVG content and attribute values; a number as printf's `fmt` writes it
// (with -0 and tiny values as 0); a coordinate to 0.1 px.
std::string svg_escape(const std::string& s);
std::string svg_number(double v, const char* fmt = "%.4g");
std::string svg_coord(double v);

// Axis ticks at 1, 2 or 5 times a power of ten covering [lo, hi], about `target` of them.
// Exposed for tests.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

} // namespace supernode::services::loadgen
