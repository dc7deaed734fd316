# docs/python-example.py runs as it is (in a scratch folder) and writes what it says.
import os
import subprocess
import sys


def test_the_docs_example_runs(tmp_path):
    source = os.environ.get("KESTREL_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    example = os.path.join(source, "docs", "python-example.py")
    env = dict(os.environ, MPLBACKEND="Agg", KESTREL_EXAMPLE_TRIALS="8")
    run = subprocess.run([sys.executable, example], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "trials" in run.stdout
    png = tmp_path / "best-so-far.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "example-lib" / "libkestrel_kernels.so").is_file()
    assert (tmp_path / "example-lib" / "kestrel_kernels.h").is_file()
