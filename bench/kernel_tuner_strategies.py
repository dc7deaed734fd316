#!/usr/bin/env python3
"""Kestrel's search strategies side by side with Kernel Tuner's, on the same spaces.

For each workload this script starts `kestrel-bench-strategies --serve` (the measurement
oracle: Kestrel's knob domains, its valid configurations and a cached real measurement
per configuration, shared by every run through its records database), then

* runs Kestrel's strategies in the oracle (request `run STRATEGY SEED T`), and
* runs Kernel Tuner's strategies through `kernel_tuner.tune_kernel` in simulation mode
  with a runner that asks the oracle for each configuration's cost instead of reading a
  complete cache file (request `eval V1 V2 ...`). Kernel Tuner's search space is Kestrel's:
  the same knob domains (`tune_params`) and one restriction, membership in Kestrel's list
  of valid configurations. The budget is `max_fevals` = T distinct configurations.

Every tool sees the same cost for the same configuration. The table gives, per strategy,
the best-so-far GFLOP/s after 64, 200 and 500 trials (median over the seeds) and the
trials to reach 95% of the best any run found (median; '>T' if a run never did).

  .venv/bin/python bench/kernel_tuner_strategies.py --bench build/bench/kestrel-bench-strategies \\
      --workloads gemm,conv2d_nchwc --seeds 1,2,3,4,5 --trials 500
  ... --target opencl --workloads gemm          (PoCL or another OpenCL device)
  ... --quick                                    (smoke: 64 trials, seed 1, sa and random
                                                  against simulated_annealing and random_sample)
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import warnings

KESTREL_DEFAULT = ["sa", "bo", "random", "ga", "anneal"]
KT_DEFAULT = ["simulated_annealing", "genetic_algorithm", "bayes_opt", "random_sample"]
CHECKPOINTS = [64, 200, 500]
FRACTION = 0.95


class Oracle:
    """The `--serve` child: one request line in, one JSON line out."""

    def __init__(self, command):
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"kestrel-bench-strategies --serve ended without answering '{line.split()[0]}'")
        data = json.loads(answer)
        if "error" in data:
            raise RuntimeError(f"kestrel-bench-strategies --serve: {data['error']}")
        return data

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        return self.proc.wait()


def run_kernel_tuner(oracle, space, strategy, seed, trials):
    """Costs (seconds, None for failures) of the distinct configurations Kernel Tuner's
    `strategy` evaluated, in order."""
    import kernel_tuner
    import numpy
    from kernel_tuner import interface, util
    from kernel_tuner.runners import simulation
    from kernel_tuner.searchspace import Searchspace

    names = [k["name"] for k in space["knobs"]]
    tune_params = {k["name"]: list(k["values"]) for k in space["knobs"]}
    listed = [tuple(v) for v in space["valid"]]
    valid = set(listed)

    class ListedSearchspace(Searchspace):
        """Kernel Tuner's search space built from Kestrel's list of valid configurations
        instead of filtering the product of the domains (2.8e8 points for CPU gemm)."""

        def _Searchspace__build_searchspace_bruteforce(self, block_size_names, max_threads, solver=None):
            return self._Searchspace__parameter_space_list_to_lookup_and_return_type(list(listed))
    trace = []
    seen = {}

    def restriction(*args, **params):
        # Kernel Tuner calls a restriction with keyword arguments, a dict or the values.
        if not params:
            params = args[0] if len(args) == 1 and isinstance(args[0], dict) else dict(zip(names, args))
        return tuple(params[n] for n in names) in valid

    class OracleRunner(simulation.SimulationRunner):
        """A simulation runner whose 'cache' is Kestrel's oracle, asked on a miss."""

        def run(self, parameter_space, tuning_options):
            results = []
            for element in parameter_space:
                if tuning_options.budget.is_done():
                    results.append(None)
                    continue
                key = tuple(int(x) for x in element)
                result = dict(zip(names, element))
                if key not in seen:
                    answer = oracle.ask("eval " + " ".join(str(x) for x in key))
                    seen[key] = answer["cost"]
                    trace.append(answer["cost"])
                    tuning_options.budget.add_evaluations(1)
                cost = seen[key]
                if cost is None:
                    result["__error__"] = util.RuntimeFailedConfig()
                else:
                    result["time"] = cost * 1e3  # Kernel Tuner's times are in ms
                result.update(compile_time=0, verification_time=0, benchmark_time=0, strategy_time=0,
                              framework_time=0)
                results.append(result)
            return results

    with tempfile.TemporaryDirectory() as tmp:
        # Simulation mode wants a cache file to exist; an empty one (the oracle fills in),
        # written as Kernel Tuner writes a new one (left open for appending).
        cache = os.path.join(tmp, "cache.json")
        header = {"device_name": "kestrel", "kernel_name": "kestrel_" + space["op"], "problem_size": [1],
                  "tune_params_keys": names, "tune_params": tune_params, "objective": "time", "cache": {}}
        with open(cache, "w") as f:
            f.write(json.dumps(header, indent="")[:-3])
        with warnings.catch_warnings():
            # Kernel Tuner warns that this 'kernel' has no thread block dimensions and no
            # arguments; true and harmless here.
            warnings.simplefilter("ignore")
            # Kernel Tuner 1.5 takes a seed but does not use it; its strategies draw from
            # Python's and NumPy's global generators.
            random.seed(seed)
            numpy.random.seed(seed)
            original = simulation.SimulationRunner, interface.Searchspace
            simulation.SimulationRunner, interface.Searchspace = OracleRunner, ListedSearchspace
            try:
                kernel_tuner.tune_kernel(
                    "kestrel_" + space["op"], "void kestrel_" + space["op"] + "() {}  /* evaluated by Kestrel */", [1], [], tune_params,
                    restrictions=[restriction], lang="C",
                    strategy=strategy, strategy_options={"max_fevals": trials,
                                                         "searchspace_construction_options": {"framework": "bruteforce"}},
                    cache=cache, simulation_mode=True, quiet=True, verbose=False, seed=seed)
            except util.StopCriterionReached:
                pass
            finally:
                simulation.SimulationRunner, interface.Searchspace = original
    return trace[:trials]


def best_after(costs, trials):
    ok = [c for c in costs[:trials] if c is not None]
    return min(ok) if ok else None


def trials_to(costs, threshold):
    best = None
    for i, c in enumerate(costs):
        if c is not None and (best is None or c < best):
            best = c
        if best is not None and best <= threshold:
            return i + 1
    return None


def bench_workload(args, workload):
    command = [args.bench, "--serve", "--workloads", workload, "--target", args.target, "--db", args.db]
    oracle = Oracle(command)
    try:
        space = oracle.ask("space")
        flops = space["flops"]
        print(f"\n=== {workload} {space['workload']} (target {space['target']}): "
              f"{space['space_size']} points before constraints ===", flush=True)
        if space["sampled"]:
            print(f"Kernel Tuner searches the {len(space['valid'])} distinct valid configurations of a seeded "
                  f"uniform sample (its search space is a list, and this space is too big to list); "
                  f"Kestrel's strategies search the whole space")
        else:
            print(f"{len(space['valid'])} valid configurations, the search space of both tools")
        runs = {}  # label -> list of cost traces, one per seed
        for strategy in args.kestrel:
            for seed in args.seeds:
                costs = oracle.ask(f"run {strategy} {seed} {args.trials}")["costs"]
                runs.setdefault("kestrel " + strategy, []).append(costs)
                print(f"  kestrel {strategy} seed {seed}: {len(costs)} trials", file=sys.stderr, flush=True)
        for strategy in args.kernel_tuner:
            for seed in args.seeds:
                costs = run_kernel_tuner(oracle, space, strategy, seed, args.trials)
                runs.setdefault("kt " + strategy, []).append(costs)
                print(f"  kernel tuner {strategy} seed {seed}: {len(costs)} trials", file=sys.stderr, flush=True)
        overall = oracle.ask("best")
    finally:
        oracle.close()

    best = overall["cost"]
    gflops = lambda s: flops / s / 1e9 if s else 0.0
    checkpoints = [t for t in CHECKPOINTS if t <= args.trials] or [args.trials]
    print(f"best found by any run: {gflops(best):.1f} GFLOP/s ({overall['config']}), "
          f"{overall['distinct']} distinct configurations measured")
    header = f"  {'strategy':32s}" + "".join(f"{'@' + str(t):>9s}" for t in checkpoints)
    print(header + f"  {'95% at (median)':>16s}  runs")
    print("  (best-so-far GFLOP/s, median over seeds; trials to reach 95% of the best found)")
    for label, traces in runs.items():
        cells = []
        for t in checkpoints:
            values = [gflops(best_after(c, t)) for c in traces]
            cells.append(f"{statistics.median(values):9.1f}")
        reached = [trials_to(c, best / FRACTION) for c in traces]
        as_numbers = [r if r is not None else float("inf") for r in reached]
        median = statistics.median(as_numbers)
        text = f">{args.trials}" if median == float("inf") else f"{median:.0f}"
        hits = sum(r is not None for r in reached)
        print(f"  {label:32s}" + "".join(cells) + f"  {text:>16s}  {hits}/{len(traces)} reached")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default="build/bench/kestrel-bench-strategies",
                        help="the kestrel-bench-strategies executable")
    parser.add_argument("--workloads", default="gemm,conv2d_nchwc", help="gemm, conv2d, conv2d_nchwc")
    parser.add_argument("--target", default="native", help="native (CPU) or a GPU target: opencl, cuda")
    parser.add_argument("--db", default="kestrel-bench-strategies.db", help="the shared measurement cache")
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--kestrel", default=",".join(KESTREL_DEFAULT), help="Kestrel strategies")
    parser.add_argument("--kernel-tuner", default=",".join(KT_DEFAULT), help="Kernel Tuner strategies")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 64 trials, seed 1, sa,random against simulated_annealing,random_sample")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.seeds = 64, "1"
        args.kestrel, args.kernel_tuner = "sa,random", "simulated_annealing,random_sample"
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.kestrel = [s for s in args.kestrel.split(",") if s]
    args.kernel_tuner = [s for s in args.kernel_tuner.split(",") if s]
    if not os.path.exists(args.bench):
        sys.exit(f"kernel_tuner_strategies: no {args.bench} (build the target kestrel-bench-strategies)")
    try:
        import kernel_tuner  # noqa: F401
    except ImportError:
        sys.exit("kernel_tuner_strategies: kernel_tuner is not installed (bash scripts/setup-python.sh --bench, "
                 "then run this with .venv/bin/python)")
    for workload in [w for w in args.workloads.split(",") if w]:
        bench_workload(args, workload)


if __name__ == "__main__":
    main()
