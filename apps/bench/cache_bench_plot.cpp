#include "apps/bench/cache_bench_plot.hpp"

#include "services/loadgen/latency_plot.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace supernode::apps {

namespace lg = services::loadgen;

namespace {

using lg::svg_coord;
using lg::svg_escape;
using lg::svg_number;

const char* path_color(const std::string& path) {
  return path == "ub" ? "#264653" : "#e76f51";
}

using series = std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>;

// One panel: a line with dots per path, y from 0 so ratios read off the heights.
void draw_panel(std::ostringstream& svg, double x0, double y0, double w, double h,
                const std::string& heading, const std::string& y_label, const series& lines,
                bool legend_right) {
  const double left = x0 + 75, right = x0 + w - 25, top = y0 + 40, bottom = y0 + h - 50;
  double x_hi = 0, y_hi = 0;
  for (auto& [name, pts] : lines)
    for (auto& [x, y] : pts) {
      x_hi = std::max(x_hi, x);
      y_hi = std::max(y_hi, y);
    }
  const auto xt = lg::nice_ticks(0, std::max(x_hi, 0.1), 6);
  const auto yt = lg::nice_ticks(0, y_hi > 0 ? y_hi * 1.05 : 1, 6);
  const double xmax = xt.back(), ymax = yt.back();
  auto sx = [&](double v) { return left + v / xmax * (right - left); };
  auto sy = [&](double v) { return bottom - v / ymax * (bottom - top); };

  svg << "<g font-family=\"sans-serif\" font-size=\"11\">\n";
  svg << "<text x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(y0 + 22)
      << "\" font-size=\"14\" font-weight=\"bold\">" << svg_escape(heading) << "</text>\n";
  for (double t : xt) {
    svg << "<line x1=\"" << svg_coord(sx(t)) << "\" y1=\"" << svg_coord(top) << "\" x2=\""
        << svg_coord(sx(t)) << "\" y2=\"" << svg_coord(bottom) << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << svg_coord(sx(t)) << "\" y=\"" << svg_coord(bottom + 15)
        << "\" text-anchor=\"middle\">" << svg_number(t * 100) << "%</text>\n";
  }
  for (double t : yt) {
    svg << "<line x1=\"" << svg_coord(left) << "\" y1=\"" << svg_coord(sy(t)) << "\" x2=\""
        << svg_coord(right) << "\" y2=\"" << svg_coord(sy(t)) << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << svg_coord(left - 6) << "\" y=\"" << svg_coord(sy(t) + 4)
        << "\" text-anchor=\"end\">" << svg_number(t, std::abs(t) >= 1000 ? "%.0f" : "%.4g")
        << "</text>\n";
  }
  svg << "<rect x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(top) << "\" width=\""
      << svg_coord(right - left) << "\" height=\"" << svg_coord(bottom - top)
      << "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg << "<text x=\"" << svg_coord((left + right) / 2) << "\" y=\"" << svg_coord(bottom + 36)
      << "\" text-anchor=\"middle\">token reuse rate</text>\n";
  svg << "<text transform=\"translate(" << svg_coord(x0 + 18) << ","
      << svg_coord((top + bottom) / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
      << svg_escape(y_label) << "</text>\n";

  for (auto& [name, pts] : lines) {
    if (pts.empty()) continue;
    std::ostringstream d;
    for (size_t i = 0; i < pts.size(); ++i)
      d << (i ? " L" : "M") << svg_coord(sx(pts[i].first)) << "," << svg_coord(sy(pts[i].second));
    svg << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"" << path_color(name)
        << "\" stroke-width=\"2\"/>\n";
    for (auto& [x, y] : pts)
      svg << "<circle cx=\"" << svg_coord(sx(x)) << "\" cy=\"" << svg_coord(sy(y))
          << "\" r=\"3.5\" fill=\"" << path_color(name) << "\"><title>" << svg_escape(name) << " "
          << svg_number(x * 100) << "%: " << svg_number(y) << "</title></circle>\n";
  }
  // Legend in the top corner the curves leave free (throughput rises, TTFT falls), on white.
  const double lx = legend_right ? right - 128 : left + 8, ly = top + 8;
  svg << "<rect x=\"" << svg_coord(lx) << "\" y=\"" << svg_coord(ly) << "\" width=\"120\" height=\""
      << svg_coord(8 + 16 * static_cast<double>(lines.size()))
      << "\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#ccc\"/>\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    const double y = ly + 16 + 16 * static_cast<double>(i);
    svg << "<rect x=\"" << svg_coord(lx + 8) << "\" y=\"" << svg_coord(y - 6)
        << "\" width=\"14\" height=\"3\" fill=\"" << path_color(lines[i].first) << "\"/>\n";
    svg << "<text x=\"" << svg_coord(lx + 28) << "\" y=\"" << svg_coord(y) << "\">EMS over "
        << (lines[i].first == "ub" ? "UB" : "VPC") << "</text>\n";
  }
  svg << "</g>\n";
}

} // namespace

std::string render_cache_bench_svg(const cache_bench_options& o, const std::string& model_id,
                                   const cache_bench_results& results) {
  constexpr double W = 1000, H = 440, header = 70, panel_w = 500, panel_h = 370;
  series throughput, ttft;
  for (auto& [path, points] : results) {
    throughput.push_back({path, {}});
    ttft.push_back({path, {}});
    for (auto& p : points) {
      if (p.completed == 0) continue;
      throughput.back().second.emplace_back(p.rate, p.throughput);
      ttft.back().second.emplace_back(p.rate, p.ttft.mean);
    }
  }
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" viewBox=\"0 0 " << W << " " << H << "\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2
      << "\" y=\"28\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"18\" "
         "font-weight=\"bold\">supernode bench cache: prefill vs token reuse rate</text>\n"
      << "<text x=\"" << W / 2
      << "\" y=\"50\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"12\" "
         "fill=\"#444\">"
      << svg_escape(model_id + " | " + std::to_string(o.prompt_len) + "-token prompts, " +
                    std::to_string(o.num_prompts) + " per rate, concurrency " +
                    std::to_string(o.concurrency) + ", cache blocks of " +
                    std::to_string(o.block_tokens) + " tokens, 1 output token")
      << "</text>\n";
  draw_panel(svg, 0, header, panel_w, panel_h, "Prefill throughput", "prompt tokens / s",
             throughput, false);
  draw_panel(svg, panel_w, header, panel_w, panel_h, "Mean TTFT", "TTFT (ms)", ttft, true);
  svg << "</svg>\n";
  return svg.str();
}

} // namespace supernode::apps
