"""A synthetic mixed CPU/GPU workload on a machine of CPU nodes and 8-GPU nodes.

Deep-learning clusters run GPU jobs beside CPU jobs, and no SWF trace records GPUs, so this
model draws such a workload from the statistics the Helios authors published for their
SenseTime clusters (Hu et al., "Characterization and Prediction of Deep Learning Workloads in
Large-Scale GPU Datacenters", SC '21; the numbers are those of `helios_cluster_summary.csv` in
their artifact, S-Lab-System-Group/HeliosArtifact, for the one public cluster, Venus). Every
number below is either one of those figures or labelled an ASSUMPTION (docs/gpu.md lists both):

Kind
    A job is a GPU job with probability 125,303 / 246,708 (Venus's GPU jobs among its jobs).
GPUs of a GPU job
    Venus's median is 1 GPU and its mean 6.736. ASSUMPTION: counts are powers of two up to 64;
    1 GPU with probability 0.55 (the published median only says at least half), 2^k GPUs
    (k = 1..6) with weights GPU_RATIO^k, the ratio fitted so that the mean is 6.736.
Run time
    Per kind, log-normal redrawn above 7 days (ASSUMPTION: the cap and the log-normal shape),
    with mu and sigma fitted so that the capped distribution's median and mean are Venus's:
    CPU jobs 21 s and 1,649.859 s, GPU jobs 204 s and 13,040.598 s.
Arrivals
    Venus's rate, 246,708 jobs in the six months April-September 2020 (183 days) on 1,022 GPUs,
    scaled to this machine's GPUs; ASSUMPTION: Poisson arrivals thinned and bunched by the
    Lublin-Feitelson daily cycle (environment/lublin.py), not Helios's own.
Machine and cores
    A GPU node as Helios's (its artifact's node description): 8 GPUs, 48 CPUs. ASSUMPTION: CPU
    nodes have the same 48 cores; a GPU job holds 6 cores per GPU (the node's share); a CPU
    job's cores follow the Lublin-Feitelson batch size model on the CPU partition; CPU jobs run
    on CPU nodes (SWF partition 1) and GPU jobs on GPU nodes (2); estimates are exact
    (Helios records no requested times); memory is not modelled.
"""

from __future__ import annotations

import math

import numpy as np

from .lublin import LublinParams, draw_sizes, on_daily_clock
from .machine import Machine, Partition, on_machine
from .workload import Workload

#: Helios Venus (helios_cluster_summary.csv): jobs, GPU jobs, GPUs, days of the trace.
VENUS_JOBS, VENUS_GPU_JOBS, VENUS_GPUS, VENUS_DAYS = 246_708, 125_303, 1_022, 183
#: ASSUMPTION: the share of 1-GPU jobs and the largest GPU job (see the module docstring).
SINGLE_GPU, MAX_GPUS_LOG2 = 0.55, 6
#: Fitted: weights GPU_RATIO^k of 2^k GPUs, k = 1..6, give the mean 6.736 with SINGLE_GPU.
GPU_RATIO = 0.78446
#: Fitted: (mu, sigma) of log(run) per kind, redrawn above MAX_RUN, for Venus's median and mean.
CPU_LOG_RUN, GPU_LOG_RUN = (3.0468, 3.1559), (5.4030, 3.7704)
MAX_RUN = 7 * 86_400  # ASSUMPTION
NODE_CORES, NODE_GPUS = 48, 8
CPU_PARTITION, GPU_PARTITION = 1, 2


def gpu_mixed_machine(cpu_nodes: int = 8, gpu_nodes: int = 16) -> Machine:
    """CPU nodes and 8-GPU nodes of 48 cores, shared by jobs, first fit (docs/gpu.md)."""
    return Machine((Partition("cpu", cpu_nodes, NODE_CORES, swf=(CPU_PARTITION,)),
                    Partition("gpu", gpu_nodes, NODE_CORES, gpus=NODE_GPUS, swf=(GPU_PARTITION,))),
                   name="gpu-mixed")


def _gpu_counts(rng: np.random.Generator, n: int, most: int) -> np.ndarray:
    multi = GPU_RATIO ** np.arange(1, MAX_GPUS_LOG2 + 1)
    k = rng.choice(MAX_GPUS_LOG2 + 1, size=n, p=np.concatenate(([SINGLE_GPU], (1 - SINGLE_GPU) * multi / multi.sum())))
    return np.minimum(2 ** k, 2 ** int(math.log2(most))).astype(np.int64)


def _log_normal_runs(rng: np.random.Generator, n: int, mu: float, sigma: float) -> np.ndarray:
    """Run times of at least 1 s from log-normal draws, each redrawn while above MAX_RUN."""
    runs = np.exp(rng.normal(mu, sigma, n))
    bad = np.flatnonzero(runs > MAX_RUN)
    while bad.size:
        runs[bad] = np.exp(rng.normal(mu, sigma, bad.size))
        bad = bad[runs[bad] > MAX_RUN]
    return np.maximum(np.floor(runs), 1).astype(np.int64)


def generate_gpu_mixed(n_jobs: int, seed: int = 0, machine: Machine | None = None) -> Workload:
    """`n_jobs` jobs of the mixed model on `machine` (`gpu_mixed_machine`'s shape: a CPU and a GPU
    partition; by default its own), which the workload carries; the same seed, the same jobs."""
    machine = machine or gpu_mixed_machine()
    cpu, gpu = machine.partitions
    rng = np.random.default_rng(seed)
    per_day = VENUS_JOBS / VENUS_DAYS / VENUS_GPUS * gpu.nodes * gpu.gpus
    submit = on_daily_clock(np.cumsum(rng.exponential(86_400 / per_day, n_jobs)), LublinParams())
    is_gpu = rng.random(n_jobs) < VENUS_GPU_JOBS / VENUS_JOBS
    gpus = np.where(is_gpu, _gpu_counts(rng, n_jobs, gpu.nodes * gpu.gpus), 0)
    size = np.where(is_gpu, gpus * (gpu.cores // gpu.gpus), draw_sizes(rng, n_jobs, cpu.nodes * cpu.cores, LublinParams()))
    run = np.where(is_gpu, _log_normal_runs(rng, n_jobs, *GPU_LOG_RUN), _log_normal_runs(rng, n_jobs, *CPU_LOG_RUN))
    jobs = Workload(name=f"gpu-mixed-{n_jobs}j-seed{seed}", procs=machine.cores,
                        job_id=np.arange(1, n_jobs + 1, dtype=np.int64), submit=submit, run=run, size=size,
                        requested=run.copy(), user=np.full(n_jobs, -1, dtype=np.int64), gpus=gpus,
                        partition=np.where(is_gpu, GPU_PARTITION, CPU_PARTITION),
                        header={"Generator": "gpu-mixed (hpcgym.environment.gpu_mixed, docs/gpu.md)",
                                "Seed": str(seed), "Machine": machine.describe()})
    return on_machine(jobs, machine)
