# The package runs from where pip installed it, with the kestrel-device and
# libkestrel_rt it ships.
import os
import sys

import kestrel


def test_imported_from_the_venv_not_the_source_tree():
    path = os.path.realpath(kestrel.__file__)
    assert os.path.realpath(sys.prefix) in path or "site-packages" in path, path
    source = os.environ.get("KESTREL_SOURCE_DIR")
    if source:
        # Not the source tree's python/kestrel (the venv itself may live in the tree).
        assert not path.startswith(os.path.join(os.path.realpath(source), "python") + os.sep), path
    assert kestrel._kestrel.__file__.endswith(".so")


def test_the_embedded_pool_uses_the_packaged_device():
    device = os.path.join(os.path.dirname(kestrel.__file__), "bin", "kestrel-device")
    assert os.access(device, os.X_OK)
    assert os.environ["KESTREL_DEVICE_BIN"] == device
    lib = os.path.join(os.path.dirname(kestrel.__file__), "lib")
    assert os.path.isfile(os.path.join(lib, "libkestrel_rt.so"))
    assert os.path.isfile(os.path.join(lib, "libkestrel_rt.a"))
