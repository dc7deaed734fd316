// The subcommands of `kestrel`. Each takes argv with argv[1] being its own name and
// returns the process exit status (0 ok, 1 failure, 2 usage error).
#pragma once

namespace kestrel::tools {

int run_tracker(int argc, char** argv);
int run_query(int argc, char** argv);
int run_ops(int argc, char** argv);
int run_profile(int argc, char** argv);
int run_tune(int argc, char** argv);
int run_best(int argc, char** argv);
int run_records(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_model(int argc, char** argv);  // `kestrel run`
int run_tasks(int argc, char** argv);
int run_export(int argc, char** argv);
int run_datagen(int argc, char** argv);
int run_cost_model(int argc, char** argv);  // `kestrel cost-model train|show|eval`
int run_dataset(int argc, char** argv);
int run_plot(int argc, char** argv);  // `kestrel plot`: best-so-far charts from records

}  // namespace kestrel::tools
