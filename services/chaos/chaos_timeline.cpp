#include "services/chaos/chaos_timeline.hpp"

#include "services/loadgen/latency_plot.hpp"
#include "services/loadgen/report.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace supernode::services::chaos {

namespace {

using loadgen::svg_coord;
using loadgen::svg_escape;
using loadgen::svg_number;

constexpr double figure_w = 1000, panel_h = 300, header_h = 70;
constexpr double left = 80, right = figure_w - 30, plot_top = 40, plot_bottom = 45;

struct panel {
  double y0 = 0;
  double t_max = 1, v_max = 1;
  double top() const { return y0 + plot_top; }
  double bottom() const { return y0 + panel_h - plot_bottom; }
  double x(double t) const { return left + t / t_max * (right - left); }
  double y(double v) const { return bottom() - std::min(v, v_max) / v_max * (bottom() - top()); }
};

// Frame, ticks on both axes, the faults' windows and marks.
void draw_frame(std::ostringstream& svg, const panel& p, const std::string& heading,
                const std::string& y_label, const std::vector<fault_record>& faults) {
  svg << "<text x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(p.y0 + 22)
      << "\" font-size=\"14\" font-weight=\"bold\">" << svg_escape(heading) << "</text>\n";
  for (const auto& f : faults) {
    const double x0 = p.x(f.at_s), x1 = p.x(std::min(p.t_max, std::max(f.end_s(), f.at_s)));
    svg << "<rect x=\"" << svg_coord(x0) << "\" y=\"" << svg_coord(p.top()) << "\" width=\""
        << svg_coord(std::max(2.0, x1 - x0)) << "\" height=\"" << svg_coord(p.bottom() - p.top())
        << "\" fill=\"#e76f51\" fill-opacity=\"0.15\"/>\n";
    svg << "<text x=\"" << svg_coord(x0 + 3) << "\" y=\"" << svg_coord(p.top() + 12)
        << "\" fill=\"#b5442a\">" << svg_escape(f.kind + " " + f.target) << "</text>\n";
    auto mark = [&](const std::optional<double>& t, const char* color) {
      if (!t) return;
      svg << "<line x1=\"" << svg_coord(p.x(*t)) << "\" x2=\"" << svg_coord(p.x(*t)) << "\" y1=\""
          << svg_coord(p.top()) << "\" y2=\"" << svg_coord(p.bottom()) << "\" stroke=\"" << color
          << "\" stroke-dasharray=\"4 3\"/>\n";
    };
    mark(f.detected_s, "#e9c46a");
    mark(f.recovered_s, "#2a9d8f");
  }
  svg << "<rect x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(p.top()) << "\" width=\""
      << svg_coord(right - left) << "\" height=\"" << svg_coord(p.bottom() - p.top())
      << "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (double t : loadgen::nice_ticks(0, p.t_max))
    if (t <= p.t_max)
      svg << "<text x=\"" << svg_coord(p.x(t)) << "\" y=\"" << svg_coord(p.bottom() + 15)
          << "\" text-anchor=\"middle\">" << svg_number(t) << "</text>\n";
  for (double v : loadgen::nice_ticks(0, p.v_max))
    if (v <= p.v_max)
      svg << "<text x=\"" << svg_coord(left - 6) << "\" y=\"" << svg_coord(p.y(v) + 4)
          << "\" text-anchor=\"end\">" << svg_number(v) << "</text>\n";
  svg << "<text x=\"" << svg_coord((left + right) / 2) << "\" y=\"" << svg_coord(p.bottom() + 33)
      << "\" text-anchor=\"middle\">seconds since the load started</text>\n";
  svg << "<text transform=\"translate(" << svg_coord(left - 55) << ","
      << svg_coord((p.top() + p.bottom()) / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
      << svg_escape(y_label) << "</text>\n";
}

} // namespace

std::string render_timeline_svg(const std::vector<loadgen::request_outcome>& outcomes,
                                const std::vector<fault_record>& faults, const std::string& title,
                                const std::string& subtitle) {
  double t_max = 1;
  for (const auto& o : outcomes) t_max = std::max(t_max, o.end_s);
  for (const auto& f : faults) t_max = std::max(t_max, f.end_s());
  t_max = std::ceil(t_max);

  // Output tokens per second in one-second bins.
  std::vector<double> per_second(static_cast<size_t>(std::ceil(t_max)) + 1, 0.0);
  for (const auto& o : outcomes)
    for (double t : o.token_times_s)
      if (t >= 0) per_second[std::min(per_second.size() - 1, static_cast<size_t>(t))] += 1;
  panel throughput{header_h, t_max, 1};
  for (double v : per_second) throughput.v_max = std::max(throughput.v_max, v * 1.1);

  panel latency{header_h + panel_h, t_max, 1};
  for (const auto& o : outcomes)
    if (auto m = loadgen::metrics_of(o); o.ok && m.ttft_ms)
      latency.v_max = std::max(latency.v_max, *m.ttft_ms * 1.1);

  std::ostringstream svg;
  const double figure_h = header_h + 2 * panel_h;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << figure_w << "\" height=\""
      << figure_h << "\" viewBox=\"0 0 " << figure_w << " " << figure_h << "\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<g font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<text x=\"" << svg_coord(left) << "\" y=\"24\" font-size=\"16\" font-weight=\"bold\">"
      << svg_escape(title) << "</text>\n";
  std::istringstream lines(subtitle);
  double line_y = 42;
  for (std::string line; std::getline(lines, line); line_y += 14)
    svg << "<text x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(line_y) << "\" fill=\"#555\">"
        << svg_escape(line) << "</text>\n";

  draw_frame(svg, throughput, "output tokens per second", "tokens/s", faults);
  svg << "<polyline fill=\"none\" stroke=\"#264653\" stroke-width=\"1.5\" points=\"";
  for (size_t s = 0; s < per_second.size() && static_cast<double>(s) <= t_max; ++s)
    svg << svg_coord(throughput.x(static_cast<double>(s) + 0.5)) << ","
        << svg_coord(throughput.y(per_second[s])) << " ";
  svg << "\"/>\n";

  draw_frame(svg, latency,
             "TTFT of each request at its send time (red: failed, at its end; dashed: fault "
             "detected / recovered)",
             "TTFT ms", faults);
  for (const auto& o : outcomes) {
    const auto m = loadgen::metrics_of(o);
    if (o.ok && m.ttft_ms)
      svg << "<circle cx=\"" << svg_coord(latency.x(o.send_s)) << "\" cy=\""
          << svg_coord(latency.y(*m.ttft_ms)) << "\" r=\"2\" fill=\"#264653\"/>\n";
    else if (!o.ok)
      svg << "<circle cx=\"" << svg_coord(latency.x(o.end_s)) << "\" cy=\""
          << svg_coord(latency.bottom() - 4) << "\" r=\"3\" fill=\"#e63946\"/>\n";
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

} // namespace supernode::services::chaos
