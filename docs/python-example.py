# %% [markdown]
# # Kestrel from Python
#
# Tunes a small gemm on this machine (the embedded pool: a tracker inside this process and
# the kestrel-device the package ships), prints the progress, reads the records into a
# pandas DataFrame, plots the best-so-far curve into `best-so-far.png` and exports a
# kernel library into `example-lib/`. Run it as a script (`python docs/python-example.py`)
# or cell by cell (`# %%`) in Jupyter or VS Code. Install the package first:
# `scripts/install-python-package.sh` (see docs/python.md). python/tests/test_example.py
# runs this file, so it stays true.

# %%
import os

import kestrel

print("kestrel", kestrel.version())
space = kestrel.space("gemm", {"M": 64, "N": 64, "K": 64})
print("knobs:", ", ".join(k["name"] for k in space.knobs), "| space:", space.size, "points")
print("default on this machine:", space.default)

# %% Tune: one callback per batch
trials = int(os.environ.get("KESTREL_EXAMPLE_TRIALS", "24"))


def show(progress):
    if progress["phase"] == "tuning":
        print(f"{progress['trials']:3d}/{progress['total']} trials | best {progress['best_gflops']:6.2f} GFLOP/s"
              f" | default {progress['default_gflops']:6.2f}")


result = kestrel.tune("gemm", {"M": 64, "N": 64, "K": 64}, trials=trials, batch=4, db="example.db", seed=1,
                      callback=show, repeat=3, min_repeat_ms=10, final_top=2, final_repeat=5, vendors="none")
print("best:", result.best_config, f"{result.best_gflops:.2f} GFLOP/s", f"({result.trials} trials)")
print("records:", result.db)

# %% The records as a DataFrame
df = kestrel.read_records("example.db")
print(df[["id", "config", "status", "gflops", "final"]].tail())
search = df[~df["final"] & (df["implementation"] == "kestrel")].reset_index(drop=True)
search["best_so_far"] = search["gflops"].cummax()

# %% Best-so-far against trials (Agg: no display needed)
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.step(search.index + 1, search["best_so_far"], where="post", label="best so far")
ax.scatter(search.index + 1, search["gflops"], s=10, alpha=0.5, label="each trial")
ax.set_xlabel("trials")
ax.set_ylabel("GFLOP/s")
ax.set_title("gemm 64x64x64")
ax.legend()
fig.tight_layout()
fig.savefig("best-so-far.png", dpi=100)
print("plot: best-so-far.png")

# %% Export a kernel library of the best records
report = kestrel.export("example.db", "example-lib")
for k in report.kernels:
    print(k["op"], k["params"], k["origin"], k["config"], "->", k["entry"])
print("files:", ", ".join(report.files))
