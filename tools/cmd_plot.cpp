// `kestrel plot`: best-so-far charts (SVG or PNG) from a records database.
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/base/suggest.h"
#include "kestrel/plot/chart.h"
#include "kestrel/plot/curves.h"
#include "kestrel/records/records.h"

namespace kestrel::tools {
namespace {

// A database's name in the legend and for --label: its file name without the directory
// and extension ("sa" for runs/sa.db), the database name of a PostgreSQL URI.
std::string database_name(const std::string& location) {
  const std::string path = location.substr(0, location.find('?'));
  const std::string stem = std::filesystem::path(path).stem().string();
  return stem.empty() ? path : stem;
}

// What --label asks for.
struct Labels {
  std::vector<std::string> sources;                           // per --db: the name its curves show
  std::vector<std::pair<std::string, std::string>> sessions;  // session id prefix, its text
};

// --label NAME=TEXT: TEXT names, in the legend, the curves of the database called NAME
// (database_name, or the --db value as given), else those of the sessions whose id starts
// with NAME (checked once the curves are drawn: apply_session_labels).
Labels parse_labels(const std::vector<std::string>& paths, const std::vector<std::string>& specs) {
  Labels out;
  for (const auto& path : paths) out.sources.push_back(database_name(path));
  const std::vector<std::string> names = out.sources;
  for (const std::string& spec : specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw UsageError("--label " + spec + ": give NAME=TEXT, NAME a database (sa for --db sa.db) or the start of "
                       "a session id, e.g. --label sa=annealing");
    }
    const std::string name = spec.substr(0, eq), text = spec.substr(eq + 1);
    bool database = false;
    for (std::size_t d = 0; d < paths.size(); ++d) {
      if (names[d] == name || paths[d] == name) {
        out.sources[d] = text;
        database = true;
      }
    }
    if (!database) out.sessions.emplace_back(name, text);
  }
  return out;
}

// Names each curve after its database (plot::label_by_source), then gives the sessions
// that --label names their text. UsageError for a NAME that is neither a database nor
// the start of a session drawn.
void apply_session_labels(std::vector<plot::Panel>& panels, const std::vector<std::string>& paths,
                          const Labels& labels) {
  plot::label_by_source(panels);
  std::vector<std::string> names;
  std::string listed;
  for (const auto& path : paths) {
    names.push_back(database_name(path));
    listed += (listed.empty() ? "" : ", ") + names.back();
  }
  for (const auto& [prefix, text] : labels.sessions) {
    bool used = false;
    for (auto& panel : panels) {
      for (auto& curve : panel.curves) {
        if (curve.session.rfind(prefix, 0) == 0) {
          curve.label = text;
          used = true;
        }
      }
    }
    if (!used) {
      throw UsageError("--label " + prefix + "=" + text + ": no database or session drawn is called " + prefix +
                       did_you_mean(prefix, names) + " (databases: " + listed + "; or give the start of a session id)");
    }
  }
}

}  // namespace

int run_plot(int argc, char** argv) {
  Args args("kestrel plot",
            "Draws best-so-far curves from a records database: the best GFLOP/s measured so far against the\n"
            "trials (or the time) of each tuning session, one panel per op, workload and target, one line per\n"
            "session. To compare strategies, tune each into its own database (a task's trials count across the\n"
            "sessions of one database) and give them all: --db sa.db --db ga.db. Each line is named after its\n"
            "database (sa), with its session's id where a database holds several; --label sa=annealing renames.\n"
            "The format follows -o's extension: .svg (vector, text as outlines) or .png.");
  args.multi_option("db", "FILE|URI", "records database (default kestrel.db); several --db draw their sessions side by side, "
                    "e.g. one database per strategy");
  args.option("o,output", "FILE", "the chart to write: a .svg or .png file (replaced atomically)");
  args.option("op", "NAME", "only this op");
  args.option("workload", "PARAMS", "only this workload, as the records name it, e.g. K=64,M=64,N=64");
  args.option("x", "AXIS", "trials (the session's measurements in order) or time (seconds since its first)", "trials");
  args.option("title", "TEXT", "the chart's title", "best-so-far GFLOP/s");
  args.multi_option("label", "NAME=TEXT", "legend text for the curves of a database (NAME: sa for --db sa.db) or of "
                    "the sessions whose id starts with NAME");
  args.option("width", "N", "width in pixels (PNG) or points (SVG)", "900");
  args.option("height", "N", "height in pixels (PNG) or points (SVG)", "560");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    if (!args.has("output")) throw UsageError("-o/--output FILE is required (a .svg or .png file)");
    const std::string out = args.get("output");
    try {
      plot::chart_format(out);
    } catch (const plot::ChartError& e) {
      throw UsageError(e.what());
    }
    plot::CurveQuery query;
    query.op = args.get("op");
    query.workload = args.get("workload");
    const std::string x = args.get("x", "trials");
    if (x != "trials" && x != "time") throw UsageError("--x " + x + ": give trials or time");
    query.x = x == "time" ? plot::XAxis::time : plot::XAxis::trials;
    plot::ChartOptions chart;
    chart.title = args.get("title", "best-so-far GFLOP/s");
    chart.x = query.x;
    chart.width = static_cast<int>(args.get_int("width", 900, 200, 10000));
    chart.height = static_cast<int>(args.get_int("height", 560, 150, 10000));

    std::vector<std::string> paths = args.get_all("db");
    if (paths.empty()) paths.push_back("kestrel.db");
    const Labels labels = parse_labels(paths, args.get_all("label"));
    std::vector<std::unique_ptr<records::RecordStore>> dbs;
    for (const auto& path : paths) dbs.push_back(records::open_records(path, records::OpenMode::existing));
    std::vector<plot::Panel> panels;
    for (std::size_t d = 0; d < dbs.size(); ++d) {
      for (plot::Panel& panel : plot::best_so_far(*dbs[d], query)) {
        for (auto& curve : panel.curves) curve.source = labels.sources[d];
        auto same = std::find_if(panels.begin(), panels.end(), [&](const plot::Panel& p) {
          return p.op == panel.op && p.workload == panel.workload && p.target == panel.target;
        });
        if (same == panels.end()) {
          panels.push_back(std::move(panel));
        } else {
          for (auto& curve : panel.curves) same->curves.push_back(std::move(curve));
        }
      }
    }
    if (panels.empty()) {
      const bool filtered = !query.op.empty() || !query.workload.empty();
      for (std::size_t d = 0; d < dbs.size(); ++d) {
        std::cerr << "kestrel plot: no successful tuning records" << (filtered ? " matching the filters" : "")
                  << " in " << dbs[d]->location();
        std::vector<std::string> held = plot::tuned_workloads(*dbs[d]);
        if (held.empty()) {
          std::cerr << " (the database is empty)\n";
        } else {
          std::cerr << "; it holds:\n";
          for (const auto& line : held) std::cerr << "  " << line << "\n";
        }
      }
      return 1;
    }
    apply_session_labels(panels, paths, labels);
    plot::write_chart(panels, chart, out);
    std::size_t curves = 0;
    for (const auto& p : panels) curves += p.curves.size();
    std::cout << out << ": " << panels.size() << (panels.size() == 1 ? " panel, " : " panels, ") << curves
              << (curves == 1 ? " curve" : " curves") << "\n";
    std::cout << std::fixed << std::setprecision(1);
    for (const auto& p : panels) {
      std::cout << "  " << p.op << " " << p.workload << " on " << p.target << "\n";
      for (const auto& c : p.curves) {
        std::cout << "    " << c.label << ": " << c.trials << " trials, best " << c.best_gflops << " GFLOP/s\n";
      }
    }
    return 0;
  } catch (...) {
    return report_error("kestrel plot", std::current_exception());
  }
}

}  // namespace kestrel::tools
