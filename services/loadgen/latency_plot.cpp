#include "services/loadgen/latency_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace supernode::services::loadgen {

namespace {

constexpr double figure_w = 1000, figure_h = 2 * 340 + 80;
constexpr double panel_w = 500, panel_h = 340, header_h = 80;
// Inside a panel: room for the y tick labels on the left and the x label below.
constexpr double plot_left = 70, plot_right = 30, plot_top = 50, plot_bottom = 55;
// More points than this add nothing a screen can show; ITL may have millions of samples.
constexpr size_t max_curve_points = 600;

struct marker {
  const char* name;
  double percent;
  const char* color;
};
constexpr marker markers[] = {
    {"p50", 50, "#2a9d8f"}, {"p90", 90, "#e9c46a"}, {"p99", 99, "#e76f51"}};

void draw_panel(std::ostringstream& svg, double x0, double y0, const std::string& name,
                std::vector<double> values) {
  const double left = x0 + plot_left, right = x0 + panel_w - plot_right;
  const double top = y0 + plot_top, bottom = y0 + panel_h - plot_bottom;
  std::sort(values.begin(), values.end());
  const auto summary = summarize(values);

  svg << "<g font-family=\"sans-serif\" font-size=\"11\">\n";
  std::string heading = name;
  if (summary.count)
    heading += " \u00b7 n = " + std::to_string(summary.count) + " \u00b7 mean " +
               svg_number(summary.mean) + " ms";
  svg << "<text x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(y0 + 22)
      << "\" font-size=\"14\" font-weight=\"bold\">" << svg_escape(heading) << "</text>\n";
  svg << "<rect x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(top) << "\" width=\""
      << svg_coord(right - left) << "\" height=\"" << svg_coord(bottom - top)
      << "\" fill=\"none\" stroke=\"#333\"/>\n";
  if (values.empty()) {
    svg << "<text x=\"" << svg_coord((left + right) / 2) << "\" y=\""
        << svg_coord((top + bottom) / 2)
        << "\" text-anchor=\"middle\" fill=\"#888\">no samples</text>\n</g>\n";
    return;
  }

  double lo = values.front(), hi = values.back();
  if (hi - lo < 1e-9 * std::max(1.0, std::abs(hi))) { // one value: give the axis some width
    lo -= std::max(1.0, std::abs(lo) * 0.1);
    hi += std::max(1.0, std::abs(hi) * 0.1);
  }
  const auto ticks = nice_ticks(lo, hi);
  lo = std::min(lo, ticks.front());
  hi = std::max(hi, ticks.back());
  auto sx = [&](double v) { return left + (v - lo) / (hi - lo) * (right - left); };
  auto sy = [&](double f) { return bottom - f * (bottom - top); };

  for (double t : ticks) {
    svg << "<line x1=\"" << svg_coord(sx(t)) << "\" y1=\"" << svg_coord(top) << "\" x2=\""
        << svg_coord(sx(t)) << "\" y2=\"" << svg_coord(bottom) << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << svg_coord(sx(t)) << "\" y=\"" << svg_coord(bottom + 15)
        << "\" text-anchor=\"middle\">" << svg_number(t) << "</text>\n";
  }
  for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    svg << "<line x1=\"" << svg_coord(left) << "\" y1=\"" << svg_coord(sy(f)) << "\" x2=\""
        << svg_coord(right) << "\" y2=\"" << svg_coord(sy(f)) << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << svg_coord(left - 6) << "\" y=\"" << svg_coord(sy(f) + 4)
        << "\" text-anchor=\"end\">" << svg_number(f) << "</text>\n";
  }
  svg << "<text x=\"" << svg_coord((left + right) / 2) << "\" y=\"" << svg_coord(bottom + 38)
      << "\" text-anchor=\"middle\">" << svg_escape(name) << " (ms)</text>\n";
  svg << "<text transform=\"translate(" << svg_coord(x0 + 22) << ","
      << svg_coord((top + bottom) / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">fraction of samples &#8804; x</text>\n";

  // The empirical CDF as a step line: F jumps to (i + 1) / n at the i-th smallest value.
  const size_t n = values.size();
  const size_t points = std::min(n, max_curve_points);
  std::ostringstream path;
  path << "M" << svg_coord(sx(values.front())) << "," << svg_coord(sy(0));
  double prev_f = 0;
  for (size_t k = 0; k < points; ++k) {
    const size_t i = (k + 1) * n / points - 1;
    const double f = static_cast<double>(i + 1) / static_cast<double>(n);
    path << " L" << svg_coord(sx(values[i])) << "," << svg_coord(sy(prev_f)) << " L"
         << svg_coord(sx(values[i])) << "," << svg_coord(sy(f));
    prev_f = f;
  }
  svg << "<path d=\"" << path.str()
      << "\" fill=\"none\" stroke=\"#264653\" stroke-width=\"1.5\"/>\n";

  for (const auto& m : markers) {
    const double v = sx(percentile(values, m.percent));
    svg << "<line x1=\"" << svg_coord(v) << "\" y1=\"" << svg_coord(top) << "\" x2=\""
        << svg_coord(v) << "\" y2=\"" << svg_coord(bottom) << "\" stroke=\"" << m.color
        << "\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>\n";
  }
  // The legend goes bottom-right, the corner a CDF never passes through, on white so the
  // marker lines behind it do not strike through the numbers; stacked, so percentiles close
  // together never overprint each other.
  const double legend_w = 124, legend_h = 52;
  const double lx = right - legend_w - 4, ly0 = bottom - legend_h - 4;
  svg << "<rect x=\"" << svg_coord(lx) << "\" y=\"" << svg_coord(ly0) << "\" width=\"" << legend_w
      << "\" height=\"" << legend_h << "\" fill=\"white\" fill-opacity=\"0.9\"/>\n";
  for (size_t m = 0; m < std::size(markers); ++m) {
    const double ly = ly0 + 16 + 15 * static_cast<double>(m);
    svg << "<rect x=\"" << svg_coord(lx + 6) << "\" y=\"" << svg_coord(ly - 5)
        << "\" width=\"10\" height=\"3\" fill=\"" << markers[m].color << "\"/>\n";
    svg << "<text x=\"" << svg_coord(lx + 20) << "\" y=\"" << svg_coord(ly) << "\">"
        << markers[m].name << " " << svg_number(percentile(values, markers[m].percent))
        << " ms</text>\n";
  }
  svg << "</g>\n";
}

} // namespace

std::string svg_number(double v, const char* fmt) {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, std::abs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

std::string svg_coord(double v) {
  return svg_number(v, "%.1f");
}

std::string svg_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  std::vector<double> ticks;
  const double first = std::floor(lo / step) * step, last = std::ceil(hi / step) * step;
  for (double t = first; t <= last + step * 1e-9; t += step) ticks.push_back(t);
  return ticks;
}

std::string render_latency_svg(const latency_samples& samples, const std::string& title,
                               const std::string& subtitle) {
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << figure_w << "\" height=\""
      << figure_h << "\" viewBox=\"0 0 " << figure_w << " " << figure_h << "\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << figure_w / 2
      << "\" y=\"28\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"18\" "
         "font-weight=\"bold\">"
      << svg_escape(title) << "</text>\n";
  // The subtitle's lines ('\n'-separated) go under the title.
  std::istringstream lines(subtitle);
  double y = 50;
  for (std::string line; std::getline(lines, line); y += 16)
    svg << "<text x=\"" << figure_w / 2 << "\" y=\"" << y
        << "\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"12\" fill=\"#444\">"
        << svg_escape(line) << "</text>\n";
  draw_panel(svg, 0, header_h, "TTFT", samples.ttft_ms);
  draw_panel(svg, panel_w, header_h, "TPOT", samples.tpot_ms);
  draw_panel(svg, 0, header_h + panel_h, "ITL", samples.itl_ms);
  draw_panel(svg, panel_w, header_h + panel_h, "E2E latency", samples.e2e_ms);
  svg << "</svg>\n";
  return svg.str();
}

} // namespace supernode::services::loadgen
