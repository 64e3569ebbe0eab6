"""Test-wide setup: CPU runs execute Triton kernels in the interpreter; ``gpu`` tests skip
without CUDA."""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Must be set before any kernel module is imported: triton.jit reads it at decoration time.
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # The CPU tests run many tiny ops; intra-op threads only add contention on a 2-core CI box.
    torch.set_num_threads(1)
else:
    # GPU tests compare against the float64 reference on the CPU; pytest-xdist workers each
    # taking every core oversubscribe the machine many times over, so share the cores out.
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if _workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // _workers))

torch.set_default_dtype(torch.float32)


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def usage_error(capsys):
    """``usage_error(call)``: runs ``call()``, which must stop as a usage error (``SystemExit``
    with code 2, as argparse's ``error`` exits), and returns what it wrote to stderr."""

    def run(call) -> str:
        with pytest.raises(SystemExit) as stop:
            call()
        assert stop.value.code == 2
        return capsys.readouterr().err

    return run
