#include "apps/bench/scale_bench_plot.hpp"

#include "services/loadgen/latency_plot.hpp"

#include <algorithm>
#include <sstream>

namespace supernode::apps {

namespace lg = services::loadgen;
using lg::svg_coord;
using lg::svg_escape;
using lg::svg_number;

namespace {

struct plot_line {
  std::string name, color;
  std::vector<std::pair<double, double>> points;
  bool step = false;   // holds its value until the next point (counts)
  bool dashed = false; // a target
};

struct panel_box {
  double x0, y0, w, h;
};

void draw_panel(std::ostringstream& svg, const panel_box& box, const std::string& heading,
                double x_max, const std::vector<plot_line>& lines,
                const std::vector<scale_event>& events) {
  const double left = box.x0 + 55, right = box.x0 + box.w - 15, top = box.y0 + 30,
               bottom = box.y0 + box.h - 35;
  double y_hi = 0;
  for (const auto& l : lines)
    for (const auto& [x, y] : l.points) y_hi = std::max(y_hi, y);
  const auto xt = lg::nice_ticks(0, std::max(x_max, 1.0), 6);
  const auto yt = lg::nice_ticks(0, y_hi > 0 ? y_hi * 1.1 : 1, 5);
  const double xmax = xt.back(), ymax = yt.back();
  auto sx = [&](double v) { return left + v / xmax * (right - left); };
  auto sy = [&](double v) { return bottom - v / ymax * (bottom - top); };

  svg << "<g font-family=\"sans-serif\" font-size=\"10\">\n<text x=\"" << svg_coord(left)
      << "\" y=\"" << svg_coord(box.y0 + 18) << "\" font-size=\"12\" font-weight=\"bold\">"
      << svg_escape(heading) << "</text>\n";
  auto grid = [&](double x1, double y1, double x2, double y2) {
    svg << "<line x1=\"" << svg_coord(x1) << "\" y1=\"" << svg_coord(y1) << "\" x2=\""
        << svg_coord(x2) << "\" y2=\"" << svg_coord(y2) << "\" stroke=\"#e5e5e5\"/>\n";
  };
  for (double t : xt) {
    grid(sx(t), top, sx(t), bottom);
    svg << "<text x=\"" << svg_coord(sx(t)) << "\" y=\"" << svg_coord(bottom + 13)
        << "\" text-anchor=\"middle\">" << svg_number(t) << " s</text>\n";
  }
  for (double t : yt) {
    grid(left, sy(t), right, sy(t));
    svg << "<text x=\"" << svg_coord(left - 5) << "\" y=\"" << svg_coord(sy(t) + 3)
        << "\" text-anchor=\"end\">" << svg_number(t) << "</text>\n";
  }
  svg << "<rect x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(top) << "\" width=\""
      << svg_coord(right - left) << "\" height=\"" << svg_coord(bottom - top)
      << "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (const auto& e : events) {
    if (e.command_s > xmax) continue;
    svg << "<line x1=\"" << svg_coord(sx(e.command_s)) << "\" y1=\"" << svg_coord(top) << "\" x2=\""
        << svg_coord(sx(e.command_s)) << "\" y2=\"" << svg_coord(bottom) << "\" stroke=\""
        << (e.start ? "#2a9d8f" : "#e63946") << "\" stroke-dasharray=\"3,2\"><title>"
        << (e.start ? "start " : "drain ") << svg_escape(e.slot) << " at "
        << svg_number(e.command_s) << " s</title></line>\n";
  }
  double legend_x = left + 6;
  for (const auto& l : lines) {
    if (l.points.empty()) continue;
    std::ostringstream d;
    for (size_t i = 0; i < l.points.size(); ++i) {
      const auto [x, y] = l.points[i];
      if (i > 0 && l.step)
        d << " L" << svg_coord(sx(x)) << "," << svg_coord(sy(l.points[i - 1].second));
      d << (i ? " L" : "M") << svg_coord(sx(x)) << "," << svg_coord(sy(y));
    }
    svg << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"" << l.color
        << "\" stroke-width=\"" << (l.dashed ? "1" : "1.8") << "\""
        << (l.dashed ? " stroke-dasharray=\"6,3\"" : "") << "/>\n";
    svg << "<text x=\"" << svg_coord(legend_x) << "\" y=\"" << svg_coord(top + 12) << "\" fill=\""
        << l.color << "\">" << svg_escape(l.name) << "</text>\n";
    legend_x += 9 + 6.0 * static_cast<double>(l.name.size());
  }
  svg << "</g>\n";
}

} // namespace

std::string render_scale_timeline_svg(const std::vector<scale_run_result>& runs,
                                      const lg::slo_targets& slo, double bin_s,
                                      const std::string& title) {
  const double width = 1350, row_h = 210, header = 40;
  double x_max = 0;
  for (const auto& r : runs) x_max = std::max(x_max, r.duration_s);
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg_coord(width) << "\" height=\""
      << svg_coord(header + row_h * static_cast<double>(runs.size()))
      << "\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"15\" y=\"24\" font-family=\"sans-serif\" font-size=\"15\" "
         "font-weight=\"bold\">"
      << svg_escape(title) << "</text>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    const double y0 = header + row_h * static_cast<double>(i), w = width / 3;
    plot_line prefill{"prefill", "#264653", {}, true}, decode{"decode", "#e76f51", {}, true};
    for (const auto& m : run.timeline) {
      prefill.points.emplace_back(m.t, m.prefill);
      decode.points.emplace_back(m.t, m.decode);
    }
    // Both p90s over their targets on one axis: 1 is the target, whatever its milliseconds.
    plot_line ttft{"TTFT p90 / target", "#264653", {}}, tpot{"TPOT p90 / target", "#e76f51", {}},
        tokens{"output tok/s", "#6a4c93", {}};
    for (const auto& b : bin_run(run, bin_s)) {
      const double mid = (b.from_s + b.to_s) / 2;
      if (b.ttft_p90_ms && slo.ttft_ms)
        ttft.points.emplace_back(mid, *b.ttft_p90_ms / *slo.ttft_ms);
      if (b.tpot_p90_ms && slo.tpot_ms)
        tpot.points.emplace_back(mid, *b.tpot_p90_ms / *slo.tpot_ms);
      tokens.points.emplace_back(mid, b.output_tokens_per_s);
    }
    const plot_line target{"target", "#777777", {{0, 1}, {x_max, 1}}, false, true};
    draw_panel(svg, {0, y0, w, row_h}, run.name + ": instances alive", x_max, {prefill, decode},
               run.events);
    draw_panel(svg, {w, y0, w, row_h}, run.name + ": latency p90 per bin over its target", x_max,
               {ttft, tpot, target}, run.events);
    draw_panel(svg, {2 * w, y0, w, row_h}, run.name + ": throughput", x_max, {tokens}, run.events);
  }
  svg << "</svg>\n";
  return svg.str();
}

} // namespace supernode::apps
