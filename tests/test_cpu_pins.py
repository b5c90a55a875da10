"""The CPU pins (gdpo_nemo.runs.cpu_pins): every product process runs ATen's AVX2 kernels and
oneMKL's COMPATIBLE branch, says so in its provenance, and a process that could not be pinned
says that instead. Real processes throughout: the code paths are chosen at a process's first
kernel, so each case starts one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gdpo_nemo.runs import cpu_pins, provenance

REPO = Path(__file__).resolve().parents[1]
PIN_VARIABLES = (cpu_pins.MODE_ENV, *cpu_pins.PINNED_ENV)


def unpinned_environment(**env: str) -> dict:
    """This process's environment without any pin variable, this checkout importable, plus `env`."""
    return {**{k: v for k, v in os.environ.items() if k not in PIN_VARIABLES}, "PYTHONPATH": str(REPO), **env}

# Work whose bits depend on the code paths: a matmul (oneMKL), softmax and attention (ATen).
PROBE = """
import hashlib, json, sys
PIN
import torch
from gdpo_nemo.runs import cpu_pins, provenance
g = torch.Generator().manual_seed(0)
a, w = torch.randn(16, 576, generator=g), torch.randn(1536, 576, generator=g)
x = torch.softmax(torch.nn.functional.linear(a, w), -1)
q = torch.nn.functional.scaled_dot_product_attention(*(a.view(1, 8, 16, 72),) * 3, is_causal=True)
digest = hashlib.sha256(x.numpy().tobytes() + q.numpy().tobytes()).hexdigest()[:16]
print(json.dumps({"numerics": provenance.numerics("cpu"), "digest": digest}))
"""


def probe(pin_first: bool, **env: str) -> dict:
    """Run PROBE in a fresh process whose environment holds none of the pins but `env`;
    `pin_first`: call cpu_pins.pin() before importing torch (as the product's entries do),
    else after a first matmul."""
    code = PROBE.replace("PIN", "from gdpo_nemo.runs import cpu_pins; cpu_pins.pin()" if pin_first else
                         "import torch; torch.randn(4, 4) @ torch.randn(4, 4); from gdpo_nemo.runs import cpu_pins;"
                         " cpu_pins.pin()")
    done = subprocess.run([sys.executable, "-c", code], env=unpinned_environment(**env),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


@pytest.fixture(scope="module")
def has_avx2() -> bool:
    return provenance.cpu_instruction_sets() in ("AVX2", "AVX512")


def test_a_pinned_process_runs_aten_avx2_and_onemkl_compatible_and_records_no_cpu_name(has_avx2):
    found = probe(True)
    numbers = found["numerics"]
    assert numbers["cpu_numerics"] == "pinned" and numbers["mkl_branch"] == "COMPATIBLE"
    if not has_avx2:
        pytest.skip("this CPU has no AVX2: ATen falls back to its default kernels")
    assert numbers["cpu_capability"] == "AVX2" and cpu_pins.is_pinned(numbers)
    assert "device_name" not in numbers  # the same bits on any CPU with AVX2: the name is the machine's, not the numbers'
    assert probe(True)["digest"] == found["digest"]


def test_native_leaves_torch_its_own_choices_and_records_the_cpu_name():
    numbers = probe(True, GDPO_NEMO_CPU_NUMERICS="native")["numerics"]
    assert numbers["cpu_numerics"] == "native" and numbers["mkl_branch"] != "COMPATIBLE"
    assert not cpu_pins.is_pinned(numbers) and numbers["device_name"] == provenance.cpu_model()


def test_the_pins_change_the_code_paths_where_the_machine_has_other_ones():
    pinned, native = probe(True), probe(True, GDPO_NEMO_CPU_NUMERICS="native")
    if pinned["numerics"]["mkl_branch"] == native["numerics"]["mkl_branch"] is None and \
            pinned["numerics"]["cpu_capability"] == native["numerics"]["cpu_capability"]:
        pytest.skip("a torch without oneMKL on a CPU whose widest kernels are AVX2: the pins change nothing here")
    assert pinned["digest"] != native["digest"]


def test_a_process_whose_onemkl_already_ran_is_not_called_pinned_and_says_so():
    found = probe(False)
    assert "oneMKL already ran in this process" in found["stderr"]
    numbers = found["numerics"]
    assert numbers["mkl_branch"] != "COMPATIBLE" and not cpu_pins.is_pinned(numbers)
    assert numbers["device_name"] == provenance.cpu_model()  # so the report names it beside pinned runs


def test_an_unknown_mode_is_refused_naming_the_variable_and_the_choices():
    done = subprocess.run([sys.executable, "-m", "gdpo_nemo.cli", "train", "--config",
                           str(REPO / "configs" / "local" / "tiny.yaml"), "--run-dir", "unused"], capture_output=True,
                          text=True, env=unpinned_environment(GDPO_NEMO_CPU_NUMERICS="fast"), timeout=120)
    assert done.returncode == 2
    assert "GDPO_NEMO_CPU_NUMERICS='fast': expected one of ['pinned', 'native']" in done.stderr
    assert not (REPO / "unused").exists()


def test_the_machine_is_recorded_beside_the_numerics_and_never_compared():
    assert provenance.machine() == {"cpu": provenance.cpu_model(), "cpu_instruction_sets": provenance.cpu_instruction_sets()}
    assert "machine" not in provenance.NUMBER_FIELDS
    one = {"numerics": {"cpu_capability": "AVX2"}, "machine": {"cpu": "AMD EPYC"}}
    other = {"numerics": {"cpu_capability": "AVX2"}, "machine": {"cpu": "Intel(R) Xeon(R) Processor"}}
    assert provenance.differences([one, other], ["a", "b"], provenance.NUMBER_FIELDS) == []


# One optimizer step of the local engine (policy.optimizer as configs give it) on fixed weights
# and gradients; KWARGS: extra optimizer kwargs.
OPTIMIZER_STEP = """
import hashlib, json
import torch
from gdpo_nemo.engines.local.optimizer import build_optimizer
g = torch.Generator().manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64))
for p in model.parameters():
    p.data = torch.randn(p.shape, generator=g)
    p.grad = torch.randn(p.shape, generator=g) * 1e-3
policy = {"optimizer": {"name": "torch.optim.AdamW", "kwargs": {"lr": 1e-3, "weight_decay": 0.01, "betas": [0.9, 0.999],
          "eps": 1e-8, **KWARGS}}}
optimizer = build_optimizer(model, policy)
for _ in range(3):
    optimizer.step()
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16])
"""


def optimizer_step(mkl_branch: str, kwargs: str = "{}") -> str:
    done = subprocess.run([sys.executable, "-c", OPTIMIZER_STEP.replace("KWARGS", kwargs)], timeout=300,
                          env=unpinned_environment(ATEN_CPU_CAPABILITY=cpu_pins.ATEN_CAPABILITY, MKL_CBWR=mkl_branch),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_local_engine_s_optimizer_step_does_not_depend_on_onemkl_s_branch():
    # torch's per-tensor AdamW takes its square root from oneMKL's vector math, whose COMPATIBLE
    # kernel starts from rsqrtps (other bits on Intel and AMD): the committed regeneration run's
    # warm start, made on an AMD EPYC, gave other weights on an Intel Xeon. The engine's
    # optimizer (and the warm start's) is torch's fused CPU kernel: ATen's exact sqrt, the same
    # under any oneMKL branch, so under the one a CPU of the other maker runs.
    assert optimizer_step("COMPATIBLE") == optimizer_step("AUTO")
    per_tensor = [optimizer_step(branch, '{"foreach": False}') for branch in ("COMPATIBLE", "AUTO")]
    if per_tensor[0] == per_tensor[1]:
        pytest.skip("oneMKL's own branch on this CPU computes COMPATIBLE's square roots: the per-tensor loop's"
                    " dependence cannot be shown here")
    assert optimizer_step("COMPATIBLE") not in per_tensor  # the fused kernel, not the per-tensor loop, ran


# The torch functions whose oneMKL COMPATIBLE kernels (the ones the pins select) start from
# rcpps or rsqrtps (objdump of torch 2.13's libtorch_cpu: mkl_vml_kernel_{s,d}*_EXHAynn), whose
# bits differ between Intel and AMD: a run's numbers must not call them on CPU tensors. `log`
# only in float64 (its float32 kernel uses exact instructions); `pow` by 0.5 is torch's sqrt.
APPROXIMATE_ON_ONEMKL = {"sqrt", "_foreach_sqrt", "log2", "log10", "tan", "atan", "atan2", "asin", "acos"}


def test_a_local_run_calls_none_of_onemkl_s_approximate_vector_functions(tmp_path, monkeypatch):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from gdpo_nemo.engines.local.trainer import train
    from tests.test_local_engine import VARYING, tiny_config

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__.rstrip("_")
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.device.type == "cpu" and first.is_floating_point():
                if (name in APPROXIMATE_ON_ONEMKL or (name == "log" and first.dtype == torch.float64)
                        or (name == "pow" and len(args) > 1 and args[1] == 0.5)):
                    self.seen.add(f"{name} ({first.dtype})")
            return func(*args, **(kwargs or {}))

    monkeypatch.setenv("GDPO_NEMO_CACHE", str(tmp_path / "cache"))
    common = (*VARYING, "grpo.max_num_steps=2", "loss_fn.reference_policy_kl_penalty=0.01",
              "gdpo.local.warm_start.enabled=true", "gdpo.local.warm_start.steps=2", "gdpo.local.warm_start.batch_size=2")
    for estimator in ("gdpo", "grpo"):
        calls = Calls()
        with calls:
            train(tiny_config(*common, f"gdpo.estimator={estimator}"), tmp_path / estimator, log=lambda _: None)
        assert not calls.seen, f"{estimator}: {sorted(calls.seen)} run oneMKL kernels built on approximate instructions"
    # The probe sees the calls it looks for: torch's per-tensor AdamW (foreach off) takes sqrt.
    calls = Calls()
    with calls:
        train(tiny_config(*common, "+policy.optimizer.kwargs.foreach=false"), tmp_path / "per_tensor", log=lambda _: None)
    assert "sqrt (torch.float32)" in calls.seen
